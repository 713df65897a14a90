// Types of @ratebucket/ratebucket (src/index.js), written by hand:
// test/types.test.js checks that they declare every export and nothing else.

import type { Cluster, Redis } from 'ioredis';

/** The wire contract version this package implements (redisstore/WIRE.md). */
export declare const WIRE_VERSION: 1;
/** The key prefix when none is given, as in Go: "rb:". */
export declare const DEFAULT_PREFIX: string;
/** How long a call may take, in ms, when no timeout is given: 1000. */
export declare const DEFAULT_TIMEOUT_MS: number;
/** The longest key accepted, in bytes, without the prefix: 256. */
export declare const DEFAULT_MAX_KEY_LEN: number;
/** The package's copy of the Go package's script, beside src/. */
export declare const SCRIPT_PATH: URL;

/** ioredis options a standalone client must have (spread them into yours). */
export declare const REDIS_OPTIONS: Readonly<{ autoResendUnfulfilledCommands: false; enableOfflineQueue: false }>;
/** ioredis Cluster options a cluster client must have. */
export declare const CLUSTER_OPTIONS: Readonly<{
  enableOfflineQueue: false;
  retryDelayOnFailover: 0;
  redisOptions: Readonly<{ autoResendUnfulfilledCommands: false }>;
}>;

/**
 * What went wrong: RB_CORRUPT (the key holds something that is not a
 * bucket), RB_CONNECT (no connection to Redis: the last attempt failed, or
 * none was ready within the timeout; nothing was sent), RB_TIMEOUT (the call
 * was written and no reply came within the timeout: the script may have
 * run), RB_CROSSSLOT (multi-take keys in several Cluster slots), RB_SCRIPT
 * (the script refused its arguments, or speaks another wire version),
 * RB_CLOSED (the client was closed; nothing was sent).
 */
export type RateBucketErrorCode = 'RB_CORRUPT' | 'RB_CONNECT' | 'RB_TIMEOUT' | 'RB_CROSSSLOT' | 'RB_SCRIPT' | 'RB_CLOSED';

/** An error of this package; code says which. */
export declare class RateBucketError extends Error {
  constructor(code: RateBucketErrorCode, message: string, options?: ErrorOptions);
  readonly name: 'RateBucketError';
  readonly code: RateBucketErrorCode;
}

/** A refill rate: tokens every periodUs microseconds, continuous. */
export declare class Rate {
  constructor(tokens: number, periodUs: number);
  readonly tokens: number;
  readonly periodUs: number;
  /** The policy of a bucket of capacity tokens refilled at this rate; throws RangeError outside algo's bounds. */
  burst(capacity: number): Policy;
  toString(): string;
}

/** A bucket's shape, as the wire contract's three integers. Immutable. */
export declare class Policy {
  /** @throws {RangeError} outside algo's bounds */
  constructor(capacity: number, rate: Rate);
  readonly capacity: number;
  /** Level units per token. */
  readonly unit: number;
  /** Level units per µs. */
  readonly refill: number;
  /** How long an empty bucket takes to fill, in µs, rounded up. */
  fillTimeUs(): number;
  toString(): string;
}

/** tokens every periodMs milliseconds. */
export declare function per(tokens: number, periodMs: number): Rate;
export declare function perSecond(n: number): Rate;
export declare function perMinute(n: number): Rate;
export declare function perHour(n: number): Rate;
export declare function perDay(n: number): Rate;

/** Reads the script at path and checks that it speaks WIRE_VERSION (else RB_SCRIPT). */
export declare function loadScript(path?: string | URL): { lua: string; sha: string };

/** One bucket's answer; durations in µs, exact. */
export interface Result {
  /** Admitted and charged. */
  allowed: boolean;
  /** The capacity. */
  limit: number;
  /** Whole tokens left. */
  remaining: number;
  /** 0 when allowed; else the exact wait. */
  retryAfterUs: number;
  /** Until the bucket is full again. */
  resetAfterUs: number;
}

/** What take answers: a Result and the server time it was decided at, µs. */
export interface TakeResult extends Result {
  now: number;
}

/** An open hold: what settle needs. */
export interface Hold {
  /** Names the hold's record. */
  id: string;
  /** The tokens held. */
  estimate: number;
  /** When the hold settles itself at its estimate, µs on the bucket's clock. */
  deadline: number;
  /** The policy held under, "capacity:unit:refill". */
  policy: string;
}

/** What hold answers: a TakeResult and the hold, null when refused. */
export interface HoldResult extends TakeResult {
  hold: Hold | null;
}

/** What settle answers: the bucket after, and the extra the debt bound left uncharged. */
export interface SettleResult extends TakeResult {
  uncharged: number;
}

/** The longest a hold stays open, µs. */
export declare const MAX_HOLD_TTL_US: number;

/** What reserve answers: a TakeResult and the wait before proceeding. */
export interface ReserveResult extends TakeResult {
  /** Allowed: µs to wait before proceeding (0 when the bucket held the tokens). */
  delayUs: number;
}

export interface MultiResult {
  /** Every bucket admitted, and all were charged. */
  allowed: boolean;
  /** Index of the denying bucket with the longest wait, or -1. */
  denied: number;
  /** That wait, µs. */
  retryAfterUs: number;
  /** One per request. */
  results: Result[];
  /** The server time, µs. */
  now: number;
}

/** What inspect finds. */
export interface Bucket {
  /** The Redis key. */
  key: string;
  /** Redis holds the key (absent: a full bucket). */
  exists: boolean;
  now: number;
  tokens: number;
  limit: number;
  fullInUs: number;
  deficit: number;
  stamp: number;
  /** The key's TTL (0 when absent, -1 no expiry). */
  ttlMs: number;
}

export interface TakeRequest {
  key: string;
  policy: Policy;
  /** Default 1. */
  cost?: number;
}

export interface RateBucketOptions {
  /** Put before every key; default "rb:". No braces. */
  prefix?: string;
  /** Bound of each call, ms; default 1000. */
  timeoutMs?: number;
  /** What a take does with a key that holds no bucket; default 'repair'. */
  corrupt?: 'repair' | 'keep';
  /** Told of each repaired key; default console.warn. */
  onRepair?: (key: string, err: RateBucketError) => void;
  /** Longest key in bytes; default 256. */
  maxKeyLen?: number;
  /** What a bucket written under another policy keeps; default 'keep-tokens'. */
  onPolicyChange?: 'keep-tokens' | 'proportional';
  /** The script; default SCRIPT_PATH. */
  scriptPath?: string | URL;
}

/** Buckets in Redis, shared with every process (Go or Node) that uses the same Redis, prefix and keys. */
export declare class RateBucket {
  /** client must be built with REDIS_OPTIONS (or CLUSTER_OPTIONS); the caller owns and closes it. */
  constructor(client: Redis | Cluster, options?: RateBucketOptions);
  readonly client: Redis | Cluster;
  readonly prefix: string;
  readonly timeoutMs: number;
  /** The script's SHA1. */
  readonly sha: string;
  readonly isCluster: boolean;
  /** The Redis key of the bucket at key. */
  key(key: string): string;
  /** The policy registry key of the bucket at Redis key bucket (WIRE.md, "Policy changes"). */
  registry(bucket: string): string;
  /** Takes cost (default 1) tokens, or denies with the exact wait; cost 0 peeks. */
  take(key: string, policy: Policy, cost?: number): Promise<TakeResult>;
  /** Gives n (at most the capacity) tokens back, never above the capacity. */
  refund(key: string, policy: Policy, n: number): Promise<TakeResult>;
  /** Takes cost tokens now if they exist within maxWaitUs; proceed after delayUs. Refused: nothing charged. */
  reserve(key: string, policy: Policy, cost: number, maxWaitUs: number): Promise<ReserveResult>;
  /** Takes an estimate for work whose cost is known after it; settle closes the hold. */
  hold(key: string, policy: Policy, estimate: number, ttlUs: number): Promise<HoldResult>;
  /** Closes a hold at the actual cost: the difference back, or the extra into bounded debt. */
  settle(key: string, policy: Policy, hold: Hold, actual: number): Promise<SettleResult>;
  /** Takes from several buckets: all charged or none. */
  takeMulti(reqs: TakeRequest[]): Promise<MultiResult>;
  /** The bucket as it stands, nothing written. */
  inspect(key: string, policy: Policy): Promise<Bucket>;
  /** Deletes the bucket: it is full again. */
  reset(key: string): Promise<void>;
}

/** The part of key Redis Cluster hashes. */
export declare function hashTag(key: string): string;
/** For each Cluster slot, a hash tag that lands in it. */
export declare function slotTags(): string[];
/** The Redis Cluster hash slot of key. */
export declare function slot(key: string): number;

/** A Limiter's policy: a capacity and exactly one of perSecond (whole tokens a second) and every (ms between tokens). */
export interface LimiterPolicy {
  capacity: number;
  perSecond?: number;
  every?: number;
}

/** The front door, as Go's ratebucket.NewLimiter: one policy over buckets in Redis, asked by key. */
export declare class Limiter {
  /** @throws {TypeError | RangeError} a policy that is not one, or outside algo's bounds (a fractional perSecond: use every) */
  constructor(client: Redis | Cluster, policy: Policy | LimiterPolicy, options?: RateBucketOptions);
  readonly policy: Policy;
  /** The buckets it takes from. */
  readonly bucket: RateBucket;
  /** Takes one token. */
  allow(key: string): Promise<TakeResult>;
  /** Takes cost (default 1) tokens, or denies with the exact wait; cost 0 peeks. */
  take(key: string, cost?: number): Promise<TakeResult>;
  /** Gives cost tokens back, never above the capacity. */
  refund(key: string, cost: number): Promise<TakeResult>;
  /** Takes cost tokens now if they exist within maxWaitMs; proceed after delayUs. */
  reserve(key: string, cost: number, maxWaitMs: number): Promise<ReserveResult>;
}
