import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import Redis from 'ioredis';

import { CLUSTER_OPTIONS, RateBucket, perHour, slot } from '../src/index.js';
import { rawCommand, startCluster } from '../testutil/redis.js';

let cl, rdb, rb;

before(async () => {
  cl = await startCluster();
  rdb = new Redis.Cluster(cl.nodes, CLUSTER_OPTIONS);
  rb = new RateBucket(rdb);
  await new Promise((resolve) => rdb.once('ready', resolve)); // slots known
});
after(async () => {
  rdb.disconnect();
  await cl.stop();
});

// keysOnEveryNode returns a key per master, as "host:port" → key.
function keysOnEveryNode(tag) {
  const byPort = new Map();
  for (let i = 0; byPort.size < cl.nodes.length; i++) {
    const k = `${tag}${i}`;
    const s = slot(rb.key(k));
    const owner = rdb.slots[s][0]; // "host:port" of the master
    if (!byPort.has(owner)) byPort.set(owner, k);
  }
  return byPort;
}

test('takes on every master; a multi-take needs one slot', async () => {
  const p = perHour(1).burst(10);
  for (const k of keysOnEveryNode('a').values()) {
    assert.equal((await rb.take(k, p)).remaining, 9);
  }
  const m = await rb.takeMulti([{ key: '{u1}a', policy: p }, { key: '{u1}b', policy: p, cost: 3 }]);
  assert.deepEqual(m.results.map((r) => r.remaining), [9, 7]);
  await assert.rejects(rb.takeMulti([{ key: 'a', policy: p }, { key: 'b', policy: p }]), { code: 'RB_CROSSSLOT' });
});

test('a node that lost its scripts gets EVAL, the others EVALSHA; each take charged once', async () => {
  const p = perHour(1).burst(10);
  const keys = keysOnEveryNode('b');
  for (const k of keys.values()) await rb.take(k, p);
  const [lostAddr] = keys.keys();
  const lostPort = Number(lostAddr.split(':')[1]);
  await rawCommand(lostPort, 'SCRIPT', 'FLUSH');
  const evals = async (port) => Number(/cmdstat_eval:calls=(\d+)/.exec(await rawInfo(port))?.[1] ?? 0);
  const before = new Map();
  for (const n of cl.nodes) before.set(n.port, await evals(n.port));
  for (const k of keys.values()) assert.equal((await rb.take(k, p)).remaining, 8);
  for (const n of cl.nodes) {
    assert.equal((await evals(n.port)) - before.get(n.port), n.port === lostPort ? 1 : 0, `EVALs on ${n.port}`);
  }
});

// rawInfo reads INFO commandstats whole (rawCommand stops at the first CRLF).
async function rawInfo(port) {
  const c = new Redis({ port, lazyConnect: true });
  try {
    return await c.info('commandstats');
  } finally {
    c.disconnect();
  }
}
