import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import Redis from 'ioredis';

import { RateBucket, SCRIPT_PATH, WIRE_VERSION, loadScript, per, perDay, perHour, perMinute, perSecond, slot } from '../src/index.js';
import { standalone } from '../testutil/redis.js';

let rdb, admin, rb;
let n = 0;
const fresh = () => `t${process.pid}-${++n}`;

let env;
before(async () => {
  env = await standalone();
  ({ rdb, admin, rb } = env);
});
after(() => env.stop());

// calls returns how many times the server ran cmd (INFO commandstats).
async function calls(cmd) {
  const m = new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(await admin.info('commandstats'));
  return m ? Number(m[1]) : 0;
}

describe('policy', () => {
  test('is the rate in lowest terms, as algo.Policy', () => {
    assert.deepEqual({ ...perSecond(2).burst(100) }, { capacity: 100, unit: 500000, refill: 1 });
    assert.deepEqual({ ...perMinute(60).burst(10) }, { capacity: 10, unit: 1000000, refill: 1 });
    assert.deepEqual({ ...per(3, 7).burst(5) }, { capacity: 5, unit: 7000, refill: 3 });
    assert.equal(perSecond(2).burst(100).fillTimeUs(), 50_000_000);
  });
  test('refuses what algo refuses', () => {
    for (const bad of [() => perSecond(2).burst(0), () => perSecond(0).burst(1), () => perDay(1).burst(60000),
      () => perSecond(2e9).burst(1), () => per(1, 0.0001).burst(1), () => perSecond(1).burst(1e13)]) {
      assert.throws(bad, RangeError);
    }
  });
});

describe('script', () => {
  test("is the package's copy of the Go package's file, by path", () => {
    const { lua, sha } = loadScript();
    assert.equal(lua, readFileSync(SCRIPT_PATH, 'utf8'));
    assert.equal(sha, createHash('sha1').update(readFileSync(SCRIPT_PATH)).digest('hex'));
  });
  test('of another wire version is refused', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'rbjs-')), 'next.lua');
    const lua = readFileSync(SCRIPT_PATH, 'utf8');
    const next = lua.replace(`-- Wire contract: version ${WIRE_VERSION} `, `-- Wire contract: version ${WIRE_VERSION + 1} `);
    assert.notEqual(next, lua);
    writeFileSync(path, next);
    assert.throws(() => loadScript(path), { code: 'RB_SCRIPT' });
    assert.throws(() => new RateBucket(rdb, { scriptPath: path }), { code: 'RB_SCRIPT' });
  });
  test('a prefix with a brace is refused, as in Go', () => {
    for (const prefix of ['{app}:', 'a{', 'b}']) assert.throws(() => new RateBucket(rdb, { prefix }), TypeError);
  });
  test('a client that would resend calls is refused', () => {
    const c = new Redis({ lazyConnect: true });
    assert.throws(() => new RateBucket(c), TypeError);
    c.disconnect();
  });
});

describe('take', () => {
  test('admits the burst, then denies with the exact wait', async () => {
    const p = perMinute(2).burst(100); // a token per 30 s: none refills during the test
    const key = fresh();
    let last = 0;
    for (let i = 0; i < 100; i++) {
      const r = await rb.take(key, p);
      assert.equal(r.allowed, true);
      assert.equal(r.remaining, 99 - i);
      assert.ok(r.now >= last, 'server time moves forward');
      last = r.now;
    }
    const r = await rb.take(key, p);
    assert.equal(r.allowed, false);
    assert.ok(r.retryAfterUs > 29_000_000 && r.retryAfterUs <= 30_000_000, `retry ${r.retryAfterUs}`);
    assert.equal(r.limit, 100);
  });
  test('cost 0 peeks; bad input is refused before Redis', async () => {
    const p = perSecond(1).burst(5);
    const key = fresh();
    assert.equal((await rb.take(key, p, 0)).remaining, 5);
    assert.equal((await rb.take(key, p, 0)).remaining, 5);
    await assert.rejects(rb.take(key, p, 6), RangeError);
    await assert.rejects(rb.take(key, p, -1), RangeError);
    await assert.rejects(rb.take('', p), RangeError);
    await assert.rejects(rb.take('x'.repeat(257), p), RangeError);
    await assert.rejects(rb.take(key, { capacity: 5, unit: 1e6, refill: 1 }), TypeError);
  });
  test('stores what WIRE.md says', async () => {
    const p = perSecond(2).burst(100);
    const key = fresh();
    const r = await rb.take(key, p);
    const idle = r.now + 500000;
    const e = Math.ceil(idle / 1000);
    // WIRE.md: d*10^5 + u*100 + the policy's number in the registry
    const num = (await admin.hgetBuffer(rb.registry(rb.key(key)), '100:500000:1')).readBigInt64BE(0); // then the policy's integers
    const want = 500000n * 100000n + BigInt(e * 1000 - idle) * 100n + num;
    assert.equal(await admin.get(rb.key(key)), String(want));
    assert.equal(await admin.pexpiretime(rb.key(key)), e);
  });
});

describe('takeMulti', () => {
  test('charges all or none', async () => {
    const p = perHour(1).burst(3);
    const [a, b] = [`{${fresh()}}a`, `{${n}}b`];
    await rb.take(b, p, 3);
    const m = await rb.takeMulti([{ key: a, policy: p }, { key: b, policy: p }]);
    assert.equal(m.allowed, false);
    assert.equal(m.denied, 1);
    assert.equal(m.results[0].allowed, true);
    assert.equal((await rb.inspect(a, p)).exists, false, 'the admitting bucket was not charged');
    const ok = await rb.takeMulti([{ key: a, policy: p }, { key: `{${n}}c`, policy: p, cost: 2 }]);
    assert.equal(ok.allowed, true);
    assert.deepEqual(ok.results.map((r) => r.remaining), [2, 1]);
    await assert.rejects(rb.takeMulti([{ key: a, policy: p }, { key: a, policy: p }]), RangeError);
  });
});

describe('inspect', () => {
  test('reads the stored state', async () => {
    const p = perSecond(2).burst(10);
    const key = fresh();
    const absent = await rb.inspect(key, p);
    assert.deepEqual([absent.exists, absent.tokens, absent.deficit, absent.ttlMs], [false, 10, 0, 0]);
    const r = await rb.take(key, p, 4);
    const b = await rb.inspect(key, p);
    assert.equal(b.exists, true);
    assert.equal(b.deficit, 4 * 500000, 'the stored deficit, not refilled');
    assert.equal(b.tokens, 6 + Math.floor((b.now - r.now) / 500000));
    assert.equal(b.stamp, r.now);
    assert.ok(b.ttlMs > 0 && b.ttlMs <= 2001, 'expiry rounds up to the ms');
    await rb.reset(key);
    assert.equal((await rb.inspect(key, p)).exists, false);
  });
});

describe('corrupt keys', () => {
  test('are repaired as empty buckets and reported', async () => {
    const repaired = [];
    const r2 = new RateBucket(rdb, { onRepair: (key, err) => repaired.push([key, err.code]) });
    const p = perSecond(2).burst(10);
    const key = fresh();
    await admin.hset(rb.key(key), 'tokens', 42, 'ts', Date.now()); // the article's hash
    const r = await r2.take(key, p);
    assert.equal(r.allowed, false);
    assert.equal(r.retryAfterUs, 500000);
    assert.deepEqual(repaired, [[rb.key(key), 'RB_CORRUPT']]);
    assert.equal((await r2.inspect(key, p)).deficit, 10 * 500000);
  });
  test("are kept, failing the call, with corrupt: 'keep'", async () => {
    const keep = new RateBucket(rdb, { corrupt: 'keep' });
    const key = fresh();
    await admin.set(rb.key(key), 'garbage');
    await assert.rejects(keep.take(key, perSecond(1).burst(1)), { code: 'RB_CORRUPT' });
    await assert.rejects(rb.inspect(key, perSecond(1).burst(1)), { code: 'RB_CORRUPT' });
    assert.equal(await admin.get(rb.key(key)), 'garbage');
  });
});

describe('delivery', () => {
  test('after SCRIPT FLUSH the call is sent again as EVAL, charged once', async () => {
    const p = perHour(1).burst(10);
    const key = fresh();
    await rb.take(key, p);
    const ev0 = await calls('eval');
    await admin.script('FLUSH');
    for (const want of [8, 7]) assert.equal((await rb.take(key, p)).remaining, want);
    assert.equal((await calls('eval')) - ev0, 1, 'one EVAL after the NOSCRIPT');
  });
  test('a call whose connection died is never sent again', async () => {
    const p = perHour(1).burst(10);
    const key = fresh();
    await rb.take(key, p, 0); // connected, script loaded
    const short = new RateBucket(rdb, { timeoutMs: 300 });
    await admin.call('CLIENT', 'PAUSE', 60000, 'WRITE'); // scripts wait; admin commands run
    const held = short.take(key, p);
    const id = await heldClient();
    await admin.call('CLIENT', 'KILL', 'ID', id);
    await assert.rejects(held, { code: 'RB_TIMEOUT' });
    const sent = (await calls('evalsha')) + (await calls('eval'));
    await admin.call('CLIENT', 'UNPAUSE');
    assert.equal((await rb.take(key, p, 0)).remaining, 10, 'the killed call charged nothing, and was not resent');
    assert.equal((await calls('evalsha')) + (await calls('eval')) - sent, 1, 'only the peek ran');
  });
});

// heldClient returns the id of the connection whose command the pause holds.
async function heldClient() {
  for (;;) {
    const m = /^id=(\d+) .* flags=\w*b\w* /m.exec(await admin.client('LIST'));
    if (m) return m[1];
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('slot', () => {
  test('is Redis Cluster CRC16 of the hash tag', () => {
    assert.equal(slot('foo'), 12182);
    assert.equal(slot('{user1000}.following'), slot('{user1000}.followers'));
    assert.equal(slot('123456789'), 0x31c3 % 16384);
  });
});
