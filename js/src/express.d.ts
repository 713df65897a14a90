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
  /** Told of every store error; default console.error. */
  onError?: (err: Error, req: Request) => void;
  /** Told how long each limiter call took, in ms. */
  onLatency?: (ms: number) => void;
}

export type Middleware = (req: Request, res: ServerResponse, next: (err?: unknown) => void) => Promise<void>;

/** Express middleware with httplimit's headers, 429 body and bucket keys. */
export declare function rateLimit(options: RateLimitOptions): Middleware;
