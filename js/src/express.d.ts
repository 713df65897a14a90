// Types of @ratebucket/ratebucket/express (src/express.js), written by hand:
// test/types.test.js checks that they declare every export and nothing else.
// Express's own types are not a dependency: the request and response are
// described by what the middleware reads and writes.

import type { IncomingMessage, ServerResponse } from 'node:http';

import type { Policy, RateBucket } from './index.js';

/** Starts every bucket key the middleware makes, as httplimit.DefaultPrefix: "h:". */
export declare const DEFAULT_PREFIX: string;
/** Longest ID kept verbatim in a key (httplimit.MaxIDLen): 64. */
export declare const MAX_ID_LEN: number;
/** The least time between two error log records, ms (httplimit's LogEvery): 10000. */
export declare const DEFAULT_LOG_EVERY_MS: number;

/** An Express request, as far as the middleware reads it. */
export interface Request extends IncomingMessage {
  ip?: string;
  user?: { id?: unknown };
  get?(name: string): string | undefined;
}

/** Whose bucket a request draws from: a class ("user", "ip") and an ID. */
export interface ClientKey {
  class: string;
  id: string;
}

export type KeyFunc = (req: Request) => ClientKey | null | undefined;

/** Keys by the client's address (req.ip). */
export declare function ip(req: Request): ClientKey;
/** Keys by req.user.id, which your authentication set, else by fallback. */
export declare function userOr(fallback: KeyFunc): KeyFunc;
/** The ID as it appears in a bucket key (httplimit's bucketID). */
export declare function bucketID(id: string): string;

export interface RateLimitOptions {
  /** Where the buckets live. */
  limiter: RateBucket;
  /** Capacity and rate. */
  policy: Policy;
  /** The limit's name in keys and headers, 1 to 32 of [A-Za-z0-9_.-]; default "default". */
  name?: string;
  /** Default ip. */
  key?: KeyFunc;
  /** Tokens per request; default 1. */
  cost?: number | ((req: Request) => number);
  /** Default "h:". */
  prefix?: string;
  /** A store failure serves the request ('open', default) or answers 503 ('closed'). */
  failMode?: 'open' | 'closed';
  /** Retry-After of a 503, ms; default 1000. */
  failRetryAfterMs?: number;
  /** Told of every store error; default: logged through logger at most once per logEvery. */
  onError?: (err: Error, req: Request) => void;
  /** Where the default onError writes; default console.error. */
  logger?: Logger;
  /** Least ms between two log records; the next one passed says how many were suppressed. Default 10000. */
  logEvery?: number;
  /** The clock, Unix ms, read for X-RateLimit-Reset and the log's interval; default Date.now. */
  now?: () => number;
  /** Told how long each limiter call took, in ms. */
  onLatency?: (ms: number) => void;
}

/** The store's answer the headers are written from (a Result of index.js). */
export interface Answer {
  allowed: boolean;
  limit: number;
  remaining: number;
  retryAfterUs: number;
  resetAfterUs: number;
}

/**
 * The rate-limit fields of an answer at nowMs (Unix ms): X-RateLimit-Limit,
 * -Remaining, -Reset (Unix seconds, rounded up), RateLimit, and on a denial
 * Retry-After (seconds, rounded up, never 0).
 */
export declare function rateLimitHeaders(name: string, r: Answer, nowMs: number): Record<string, string>;

/** A log sink: the message and its fields (error, path, and suppressed when records were held back). */
export type Logger = (message: string, fields: { error?: unknown; path?: string; suppressed?: number; [k: string]: unknown }) => void;

/**
 * log(message, fields) passes a record to logger unless one was passed less
 * than every ms ago by now(); the next one passed carries the count held
 * back as fields.suppressed (httplimit's log throttle).
 */
export declare function logThrottle(logger: Logger, now: () => number, every: number): (message: string, fields: Record<string, unknown>) => void;

export type Middleware = (req: Request, res: ServerResponse, next: (err?: unknown) => void) => Promise<void>;

/** Express middleware with httplimit's headers, 429 body and bucket keys. */
export declare function rateLimit(options: RateLimitOptions): Middleware;
