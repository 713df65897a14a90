// The front door, as Go's ratebucket.NewLimiter(store, policy, Config): one
// policy bound to buckets in Redis, asked by key. Every answer is the
// script's; this file only names the policy and passes the calls on.

import { RateBucket } from './ratebucket.js';
import { Policy, per, perSecond } from './policy.js';

/**
 * A token bucket per key, all of one policy, in Redis: a burst of
 * `capacity`, refilled at `perSecond` tokens a second or one token `every`
 * ms. It shares buckets with every process, in Go or Node, that uses the
 * same Redis, prefix, keys and policy.
 *
 *     const limiter = new Limiter(redis, { capacity: 100, perSecond: 2 });
 *     const r = await limiter.allow('user:42');
 *     if (!r.allowed) reply429(Math.ceil(r.retryAfterUs / 1e6));
 *
 * allow and take never wait: a denial has the exact retryAfterUs. refund
 * gives tokens back; reserve takes tokens ahead, to proceed after an exact
 * delayUs instead of being refused. Each is one script call; each result
 * carries the policy's capacity as limit.
 */
export class Limiter {
  /**
   * @param {import('ioredis').Redis | import('ioredis').Cluster} client an
   *   ioredis client built with REDIS_OPTIONS (or CLUSTER_OPTIONS)
   * @param {Policy | {capacity: number, perSecond?: number, every?: number}} policy
   *   a Policy (perMinute(10).burst(10)), or a capacity and exactly one
   *   of perSecond (whole tokens a second) and every (ms between tokens)
   * @param {import('./index.js').RateBucketOptions} [options] as RateBucket's
   * @throws {TypeError | RangeError} a policy that is not one, or outside algo's bounds
   */
  constructor(client, policy, options) {
    /** @readonly */ this.policy = toPolicy(policy);
    /** @readonly */ this.bucket = new RateBucket(client, options);
  }

  /** Takes one token from key's bucket. @param {string} key */
  allow(key) {
    return this.bucket.take(key, this.policy, 1);
  }

  /**
   * Takes cost tokens from key's bucket, or denies with the exact wait;
   * cost 0 peeks.
   * @param {string} key
   * @param {number} [cost]
   */
  take(key, cost = 1) {
    return this.bucket.take(key, this.policy, cost);
  }

  /**
   * Gives cost tokens back to key's bucket, never above its capacity.
   * @param {string} key
   * @param {number} cost
   */
  refund(key, cost) {
    return this.bucket.refund(key, this.policy, cost);
  }

  /**
   * Takes cost tokens now if they exist within maxWaitMs: allowed, the
   * caller proceeds after delayUs (0 when the bucket held them). Refused,
   * nothing is charged and retryAfterUs is exact.
   * @param {string} key
   * @param {number} cost
   * @param {number} maxWaitMs whole µs
   */
  reserve(key, cost, maxWaitMs) {
    return this.bucket.reserve(key, this.policy, cost, maxWaitMs * 1000);
  }
}

function toPolicy(p) {
  if (p instanceof Policy) return p;
  const { capacity, perSecond: rate, every } = p ?? {};
  if ((rate === undefined) === (every === undefined)) {
    throw new TypeError('ratebucket: a Limiter policy is a Policy, or { capacity } with exactly one of perSecond and every');
  }
  if (rate !== undefined && !Number.isSafeInteger(rate)) {
    // algo reads a fraction as a ratio of whole numbers; this package does
    // not compute that: one token every so many ms says it exactly.
    throw new RangeError(`ratebucket: perSecond ${rate} is not whole: give every (ms between tokens) instead`);
  }
  return (rate !== undefined ? perSecond(rate) : per(1, every)).burst(capacity);
}
