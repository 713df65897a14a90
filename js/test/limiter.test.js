// The front door, Limiter, on a real redis-server: its policy is the one
// perSecond/every/burst build, and its answers are the script's, on the
// buckets RateBucket sees.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Limiter, per, perMinute, perSecond } from '../src/index.js';
import { standalone } from '../testutil/redis.js';

let env;
let n = 0;
const fresh = () => `lim${process.pid}-${++n}`;
const MINUTE_US = 60_000_000;

before(async () => {
  env = await standalone();
});
after(() => env.stop());

describe('Limiter policy', () => {
  test('is what perSecond or every and burst build', () => {
    assert.deepEqual(new Limiter(env.rdb, { capacity: 100, perSecond: 2 }).policy, perSecond(2).burst(100));
    assert.deepEqual(new Limiter(env.rdb, { capacity: 1, every: 2000 }).policy, per(1, 2000).burst(1));
    const p = perMinute(10).burst(10);
    assert.equal(new Limiter(env.rdb, p).policy, p);
  });
  test('refuses a fractional rate, and a policy algo refuses', () => {
    assert.throws(() => new Limiter(env.rdb, { capacity: 1, perSecond: 0.5 }), { name: 'RangeError', message: /every/ });
    assert.throws(() => new Limiter(env.rdb, { capacity: 1, every: 0.0001 }), RangeError);
    assert.throws(() => new Limiter(env.rdb, { capacity: 0, perSecond: 1 }), RangeError);
    assert.throws(() => new Limiter(env.rdb, { capacity: 1, perSecond: 1, every: 1000 }), TypeError);
    assert.throws(() => new Limiter(env.rdb, { capacity: 1 }), TypeError);
    assert.throws(() => new Limiter(env.rdb), TypeError);
  });
});

describe('Limiter', () => {
  // One token a minute: the server clock moves far less than a token
  // between the calls of a test, so remaining is exact.
  const policy = { capacity: 3, every: 60_000 };

  test('allows the burst, then denies with the wait, and carries the limit', async () => {
    const lim = new Limiter(env.rdb, policy);
    const key = fresh();
    for (const left of [2, 1, 0]) {
      const r = await lim.allow(key);
      assert.deepEqual([r.allowed, r.limit, r.remaining, r.retryAfterUs], [true, 3, left, 0]);
    }
    const r = await lim.allow(key);
    assert.equal(r.allowed, false);
    assert.equal(r.limit, 3);
    assert.ok(r.retryAfterUs > 0 && r.retryAfterUs <= MINUTE_US, `retryAfterUs ${r.retryAfterUs}`);
  });

  test('takes a cost, refunds it, and shares the bucket with RateBucket', async () => {
    const lim = new Limiter(env.rdb, policy);
    const key = fresh();
    assert.equal((await lim.take(key, 3)).remaining, 0);
    assert.equal((await lim.refund(key, 2)).remaining, 2);
    const seen = await env.rb.take(key, lim.policy, 0);
    assert.deepEqual([seen.allowed, seen.remaining], [true, 2]);
    assert.equal((await lim.take(key, 2)).remaining, 0);
    assert.equal((await lim.take(key, 1)).allowed, false);
  });

  test('reserves within maxWait, and refuses beyond it charging nothing', async () => {
    const lim = new Limiter(env.rdb, policy);
    const key = fresh();
    const now = await lim.reserve(key, 3, 0);
    assert.deepEqual([now.allowed, now.delayUs, now.remaining], [true, 0, 0]);
    const late = await lim.reserve(key, 1, 1000);
    assert.equal(late.allowed, false);
    assert.ok(late.retryAfterUs > 0, `retryAfterUs ${late.retryAfterUs}`);
    const ahead = await lim.reserve(key, 1, 60_000);
    assert.equal(ahead.allowed, true);
    assert.ok(ahead.delayUs > 0 && ahead.delayUs <= MINUTE_US, `delayUs ${ahead.delayUs}`);
    // The bucket is in debt behind the reservation: a take waits longer.
    const after = await lim.take(key, 1);
    assert.equal(after.allowed, false);
    assert.ok(after.retryAfterUs > MINUTE_US, `retryAfterUs ${after.retryAfterUs}`);
  });

  test('refuses bad input before Redis', async () => {
    const lim = new Limiter(env.rdb, policy);
    await assert.rejects(lim.take('', 1), RangeError);
    await assert.rejects(lim.take(fresh(), 4), RangeError);
    await assert.rejects(lim.refund(fresh(), 4), RangeError);
    await assert.rejects(lim.reserve(fresh(), 1, -1), RangeError);
    await assert.rejects(lim.reserve(fresh(), 1, 0.0001), RangeError);
  });
});
