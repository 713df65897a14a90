import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { MAX_HOLD_TTL_US, perHour, perMinute } from '../src/index.js';
import { standalone } from '../testutil/redis.js';

// Holds and settlements (Go's Store.Hold and Store.Settle) on a real
// redis-server: the same script, the same record, the same refusals.

let env, rb;
let n = 0;
const fresh = () => `s${process.pid}-${++n}`;

before(async () => {
  env = await standalone();
  ({ rb } = env);
});
after(() => env.stop());

describe('hold and settle', () => {
  const p = perMinute(6000).burst(6000);
  const slow = perHour(60).burst(6000); // a token a minute: no refill within a test

  test('refund the difference, charge the extra into bounded debt', async () => {
    const key = fresh();
    const h = await rb.hold(key, slow, 600, 60_000_000);
    assert.equal(h.allowed, true);
    assert.equal(h.remaining, 5400);
    assert.equal(h.hold.estimate, 600);
    assert.ok(h.hold.deadline > h.now && h.hold.deadline <= h.now + 60_000_000);
    const s = await rb.settle(key, slow, h.hold, 100);
    assert.equal(s.remaining, 5900);
    const h2 = await rb.hold(key, slow, 600, 60_000_000);
    const big = await rb.settle(key, slow, h2.hold, 20_000); // 5300 left less 19400: past one bucket of debt
    assert.equal(big.remaining, 0);
    assert.equal(big.uncharged, 20_000 - 600 - 5300 - 6000);
    const next = await rb.hold(key, slow, 600, 60_000_000);
    assert.equal(next.allowed, false);
    assert.equal(next.hold, null);
    // 6000 in debt plus 600: 6600 tokens at one a minute.
    assert.ok(Math.abs(next.retryAfterUs - 6600 * 60_000_000) < 60_000_000, `retry after ${next.retryAfterUs} µs, want about 6600 min`);
  });

  test('a hold settles once; bad settles change nothing', async () => {
    const key = fresh();
    const { hold } = await rb.hold(key, slow, 600, 60_000_000);
    await assert.rejects(rb.settle(key, perMinute(60).burst(6000), hold, 1), { code: 'RB_HOLD_POLICY' });
    await assert.rejects(rb.settle(key, slow, { ...hold, estimate: 601 }, 1), { code: 'RB_HOLD_INVALID' });
    await assert.rejects(rb.settle(key, slow, { ...hold, id: 'no-such-hold' }, 1), { code: 'RB_HOLD_SETTLED' });
    await assert.rejects(rb.settle(key, slow, hold, -1), RangeError);
    assert.equal((await rb.take(key, slow, 0)).remaining, 5400);
    await rb.settle(key, slow, hold, 0);
    await assert.rejects(rb.settle(key, slow, hold, 0), { code: 'RB_HOLD_SETTLED' });
    assert.equal((await rb.take(key, slow, 0)).remaining, 6000);
  });

  test('a hold past its deadline has settled at its estimate', async () => {
    const key = fresh();
    const { hold } = await rb.hold(key, slow, 600, 1000);
    await new Promise((r) => setTimeout(r, 20));
    await assert.rejects(rb.settle(key, slow, hold, 0), { code: 'RB_HOLD_EXPIRED' });
    assert.ok((await rb.take(key, slow, 0)).remaining === 5400);
  });

  test('a ttl out of range is refused before Redis', async () => {
    await assert.rejects(rb.hold(fresh(), p, 1, 0), RangeError);
    await assert.rejects(rb.hold(fresh(), p, 1, MAX_HOLD_TTL_US + 1), RangeError);
  });
});
