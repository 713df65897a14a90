import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';

import express from 'express';
import Redis from 'ioredis';

import { RateBucket, REDIS_OPTIONS, perMinute } from '../src/index.js';
import { bucketID, logThrottle, rateLimit } from '../src/express.js';
import { freePort, standalone, startRedis } from '../testutil/redis.js';

let admin, rb;

let env;
before(async () => {
  env = await standalone();
  ({ admin, rb } = env);
});
after(() => env.stop());

// serve runs an app with the middleware on /api and returns its base URL and a closer.
async function serve(limiter, opts = {}) {
  const app = express();
  const byHeader = (req) => ({ class: 'user', id: req.get('x-user-id') });
  // A token every 10 s: none refills while a test runs, however slow the machine.
  app.use('/api', rateLimit({ limiter, policy: perMinute(6).burst(3), key: byHeader, ...opts }));
  app.get('/api/feed', (req, res) => res.json({ ok: true }));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}/api/feed`, close: () => new Promise((r) => server.close(r)) };
}

const get = (url, user) => fetch(url, { headers: user === undefined ? {} : { 'x-user-id': user } });

test("sends httplimit's headers and 429 body", async () => {
  const app = await serve(rb);
  try {
    for (let i = 0; i < 3; i++) {
      const res = await get(app.url, 'alice');
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-ratelimit-limit'), '3');
      assert.equal(res.headers.get('x-ratelimit-remaining'), String(2 - i));
      const reset = Number(res.headers.get('x-ratelimit-reset'));
      assert.ok(reset >= Date.now() / 1000 && reset <= Date.now() / 1000 + 31, `reset ${reset}`);
      assert.equal(res.headers.get('ratelimit-policy'), '"default";q=3;w=30');
      assert.equal(res.headers.get('ratelimit'), `"default";r=${2 - i};t=${10 * (i + 1)}`);
      assert.deepEqual(await res.json(), { ok: true });
    }
    const res = await get(app.url, 'alice');
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('content-type'), 'application/json');
    assert.equal(res.headers.get('retry-after'), '10');
    assert.equal(res.headers.get('x-ratelimit-remaining'), '0');
    const body = await res.text();
    const m = /^\{"error":"rate_limited","retry_after_ms":(\d+)\}\n$/.exec(body);
    assert.ok(m && Number(m[1]) > 9000 && Number(m[1]) <= 10000, body);
    assert.equal(await admin.exists('rb:h:default:user{alice}'), 1, "httplimit's key layout");
    assert.equal((await get(app.url, 'bob')).status, 200, 'another bucket');
    const missing = await get(app.url);
    assert.equal(missing.status, 400);
    assert.equal(await missing.text(), '{"error":"rate_limit_key_missing"}\n');
  } finally {
    await app.close();
  }
});

test('hashes long or unusual IDs as httplimit does', () => {
  assert.equal(bucketID('test-user'), 'test-user');
  for (const id of ['a b', 'x'.repeat(65), '{tag}', 'é']) {
    assert.equal(bucketID(id), '#' + createHash('sha256').update(id).digest('hex').slice(0, 32));
  }
});

test('a store failure is never a 429: open serves, closed answers 503', async () => {
  const down = await startRedis();
  const c = new Redis({ port: down.port, ...REDIS_OPTIONS, retryStrategy: () => null });
  const dead = new RateBucket(c, { timeoutMs: 200 });
  await down.stop();
  const errors = [];
  const open = await serve(dead, { onError: (e) => errors.push(e) });
  const closed = await serve(dead, { failMode: 'closed', onError: (e) => errors.push(e) });
  try {
    assert.equal((await get(open.url, 'carol')).status, 200);
    const res = await get(closed.url, 'carol');
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '1');
    assert.equal(await res.text(), '{"error":"rate_limiter_unavailable","retry_after_ms":1000}\n');
    assert.equal(errors.length, 2);
  } finally {
    await open.close();
    await closed.close();
    c.disconnect();
  }
});

test("store failures are logged as httplimit logs them: once per logEvery, with the count suppressed", async () => {
  const port = await freePort(); // refused: each call fails at once with RB_CONNECT
  const c = new Redis({ port, host: '127.0.0.1', ...REDIS_OPTIONS });
  c.on('error', () => {});
  let clock = 1_700_000_000_000;
  const records = [];
  const app = await serve(new RateBucket(c), { logger: (message, fields) => records.push({ message, ...fields }), now: () => clock });
  try {
    for (let i = 0; i < 51; i++) assert.equal((await get(app.url, 'dave')).status, 200, 'fail-open serves');
    assert.equal(records.length, 1, '51 failures in one instant log one record');
    assert.equal(records[0].message, 'ratebucket: store failed');
    assert.equal(records[0].error.code, 'RB_CONNECT');
    assert.equal(records[0].path, '/api/feed');
    assert.equal(records[0].suppressed, undefined);
    clock += 9_999;
    await get(app.url, 'dave');
    assert.equal(records.length, 1, 'not before logEvery (10 s)');
    clock += 1;
    await get(app.url, 'dave');
    assert.equal(records.length, 2);
    assert.equal(records[1].suppressed, 51, 'the next record counts the ones held back');
    clock += 10_000;
    await get(app.url, 'dave');
    assert.equal(records[2].suppressed, undefined, 'none held back since');
  } finally {
    await app.close();
    c.disconnect();
  }
});

test('the log throttle holds records while the clock steps back', () => {
  let clock = 100_000;
  const got = [];
  const log = logThrottle((m, f) => got.push(f.suppressed ?? 0), () => clock, 1000);
  log('x', {});
  clock -= 5000;
  log('x', {});
  clock += 5999;
  log('x', {});
  clock += 1;
  log('x', {});
  assert.deepEqual(got, [0, 2]);
  assert.throws(() => rateLimit({ limiter: rb, policy: perMinute(1).burst(1), logEvery: 0 }), RangeError);
});
