// Policies: a bucket's capacity and refill rate, reduced to the three
// integers the script takes (capacity, unit, refill), exactly as Go's
// algo.Policy holds them (redisstore/WIRE.md, "The policy"). This is the
// package's one computation of its own: the script would pay for it on
// every call, so it is done here, once per Policy, and
// redisstore/crossruntime_test.go (TestCrossRuntimePolicy) holds it, its
// bounds and fillTimeUs to algo's over generated capacities and rates.

/** Bounds of algo (algo/policy.go); the script checks the ones its math needs. */
export const MAX_CAPACITY = 1_000_000_000_000;
export const MAX_LEVEL = 2 ** 52;
export const MAX_PER_SECOND = 1_000_000_000;
export const MAX_PERIOD_US = 366 * 24 * 3600 * 1_000_000;

/**
 * A refill rate: `tokens` every `periodUs` microseconds, continuous
 * (perSecond(2) adds one token every 500 ms).
 */
export class Rate {
  /**
   * @param {number} tokens whole tokens per period, at least 1
   * @param {number} periodUs the period in whole microseconds
   */
  constructor(tokens, periodUs) {
    this.tokens = tokens;
    this.periodUs = periodUs;
  }

  /**
   * The policy of a bucket of `capacity` tokens refilled at this rate.
   * @param {number} capacity the largest burst, in tokens
   * @returns {Policy}
   * @throws {RangeError} when the policy is outside algo's bounds
   */
  burst(capacity) {
    return new Policy(capacity, this);
  }

  toString() {
    return `${this.tokens}/${this.periodUs}µs`;
  }
}

/** @param {number} tokens @param {number} periodMs @returns {Rate} */
export const per = (tokens, periodMs) => new Rate(tokens, periodMs * 1000);
/** @param {number} n tokens per second @returns {Rate} */
export const perSecond = (n) => per(n, 1000);
/** @param {number} n tokens per minute @returns {Rate} */
export const perMinute = (n) => per(n, 60_000);
/** @param {number} n tokens per hour @returns {Rate} */
export const perHour = (n) => per(n, 3_600_000);
/** @param {number} n tokens per 24 hours @returns {Rate} */
export const perDay = (n) => per(n, 86_400_000);

const isInt = Number.isSafeInteger;

/**
 * A bucket's shape: capacity (the burst) and refill rate, held as the wire
 * contract's capacity, unit (level units per token) and refill (level units
 * per µs), the rate in lowest terms. Two runtimes sharing a bucket must pass
 * the same three numbers; building both from the same capacity and rate
 * does that. Immutable.
 */
export class Policy {
  /**
   * @param {number} capacity
   * @param {Rate} rate
   * @throws {RangeError} outside algo's bounds (the message says which)
   */
  constructor(capacity, rate) {
    const { tokens, periodUs } = rate;
    const bad = (why) => new RangeError(`ratebucket: invalid policy (burst ${capacity}, ${rate}): ${why}`);
    if (!isInt(capacity) || capacity < 1 || capacity > MAX_CAPACITY) throw bad(`capacity outside [1, ${MAX_CAPACITY}]`);
    if (!isInt(tokens) || tokens < 1) throw bad('tokens must be a whole number, at least 1');
    if (!isInt(periodUs) || periodUs < 1 || periodUs > MAX_PERIOD_US) throw bad('period outside [1µs, 366 days] or not whole µs');
    // tokens/µs at most MAX_PER_SECOND/1e6, in BigInt: tokens·period may pass 2^53.
    if (BigInt(tokens) > BigInt(periodUs) * BigInt(MAX_PER_SECOND / 1_000_000)) throw bad(`above ${MAX_PER_SECOND} per second`);
    let a = BigInt(tokens);
    let b = BigInt(periodUs);
    while (b !== 0n) [a, b] = [b, a % b];
    const unit = Number(BigInt(periodUs) / a);
    const refill = Number(BigInt(tokens) / a);
    if (refill > MAX_LEVEL || capacity > Math.floor(MAX_LEVEL / unit)) {
      throw bad(`capacity×unit = ${capacity}×${unit} above 2^52: use a shorter period or a smaller capacity`);
    }
    /** @readonly */ this.capacity = capacity;
    /** @readonly */ this.unit = unit;
    /** @readonly */ this.refill = refill;
    Object.freeze(this);
  }

  /** How long an empty bucket takes to fill, in µs, rounded up. */
  fillTimeUs() {
    const r = BigInt(this.refill);
    return Number((BigInt(this.capacity * this.unit) + r - 1n) / r);
  }

  toString() {
    return `burst ${this.capacity}, ${this.refill}/${this.unit}µs`;
  }
}
