// Express middleware with the Go httplimit package's responses: the same
// headers, the same 429 body, the same bucket keys, so a Node API and a Go
// service behind one gateway draw from one bucket per client.

import { createHash } from 'node:crypto';

/** Starts every bucket key the middleware makes, as httplimit.DefaultPrefix. */
export const DEFAULT_PREFIX = 'h:';
/** Longest ID kept verbatim in a key (httplimit.MaxIDLen); longer ones are hashed. */
export const MAX_ID_LEN = 64;
/** The least time between two error log records, in ms, as httplimit's LogEvery. */
export const DEFAULT_LOG_EVERY_MS = 10_000;

/**
 * Keys by the client's address (Express's req.ip: set Express's "trust
 * proxy" only for proxies you run).
 * @param {import('express').Request} req
 */
export const ip = (req) => ({ class: 'ip', id: req.ip ?? req.socket.remoteAddress });

/**
 * Keys by req.user.id, which your authentication middleware set, else by
 * fallback. Never by a header the client wrote.
 * @param {(req: import('express').Request) => {class: string, id: string}} fallback
 */
export const userOr = (fallback) => (req) => (req.user?.id != null ? { class: 'user', id: String(req.user.id) } : fallback(req));

/**
 * The ID as it appears in a bucket key (httplimit's bucketID): verbatim when
 * at most 64 bytes of printable ASCII without space, '#', '%', '{' or '}' (so it
 * can be the Cluster hash tag), else '#' and 32 hex digits of its SHA-256.
 * @param {string} id
 */
export function bucketID(id) {
  if (Buffer.byteLength(id) <= MAX_ID_LEN && /^[!-~]*$/.test(id) && !/[#%{}]/.test(id)) return id;
  return '#' + createHash('sha256').update(id).digest('hex').slice(0, 32);
}

/**
 * Returns Express middleware that takes `cost` tokens per request from the
 * bucket of the request's key, and either calls next() with the rate-limit
 * headers set or answers 429. The headers are httplimit's: X-RateLimit-Limit,
 * -Remaining and -Reset (Unix seconds, rounded up, when the bucket is full),
 * and draft-ietf-httpapi-ratelimit-headers-10's RateLimit-Policy and
 * RateLimit; a 429 adds Retry-After (whole seconds, rounded up, never 0) and
 * the body {"error":"rate_limited","retry_after_ms":N}. A store error is never
 * a 429: failMode 'open' (the default) serves the request, 'closed' answers
 * 503 {"error":"rate_limiter_unavailable",...}. A request without a key gets
 * 400 {"error":"rate_limit_key_missing"}.
 *
 * @param {object} options
 * @param {import('./index.js').RateBucket} options.limiter where the buckets live
 * @param {import('./index.js').Policy} options.policy capacity and rate
 * @param {string} [options.name] the limit's name in keys and headers; default "default"
 * @param {(req) => {class: string, id: string}} [options.key] default ip
 * @param {number | ((req) => number)} [options.cost] default 1
 * @param {string} [options.prefix] default "h:"
 * @param {'open'|'closed'} [options.failMode] default 'open'
 * @param {number} [options.failRetryAfterMs] Retry-After of a 503; default 1000
 * @param {(err: Error, req) => void} [options.onError] told of every store
 *   error; default: log it through logger, at most once per logEvery
 * @param {(message: string, fields: object) => void} [options.logger] where
 *   the default onError writes; default console.error
 * @param {number} [options.logEvery] least ms between two log records
 *   (httplimit's Config.LogEvery): during an outage under load one record
 *   per interval, with the count of the records suppressed since the last
 *   one; default 10000
 * @param {() => number} [options.now] the clock, Unix ms, read for
 *   X-RateLimit-Reset and the log's interval; default Date.now
 * @param {(ms: number) => void} [options.onLatency] told how long each limiter call took, in ms
 */
export function rateLimit(options) {
  const { limiter, policy, name = 'default', key = ip, cost = 1, prefix = DEFAULT_PREFIX, failMode = 'open', failRetryAfterMs = 1000, onLatency } = options;
  const { logger = (message, fields) => console.error(message, fields), logEvery = DEFAULT_LOG_EVERY_MS, now = Date.now } = options;
  if (!(Number.isFinite(logEvery) && logEvery >= 1)) throw new RangeError(`ratebucket: logEvery ${logEvery} is not at least 1 ms`);
  const log = logThrottle(logger, now, logEvery);
  const onError = options.onError ?? ((err, req) => log('ratebucket: store failed', { path: req.originalUrl ?? req.url, error: err }));
  if (!/^[A-Za-z0-9_.-]{1,32}$/.test(name)) throw new TypeError(`ratebucket: limit name ${JSON.stringify(name)} is not 1 to 32 of [A-Za-z0-9_.-]`);
  if (typeof cost === 'number' && (cost < 0 || cost > policy.capacity)) throw new RangeError(`ratebucket: cost ${cost} outside [0, ${policy.capacity}]`);
  const window = Math.max(1, ceilSeconds(policy.fillTimeUs()));
  const policyField = `"${name}";q=${policy.capacity};w=${window}`;

  return async function rateLimitMiddleware(req, res, next) {
    const k = key(req);
    if (!k?.id) return json(res, 400, { error: 'rate_limit_key_missing' });
    const bucket = `${prefix}${name}:${k.class}{${bucketID(k.id)}}`;
    const c = typeof cost === 'function' ? cost(req) : cost;
    let r;
    const t0 = performance.now();
    try {
      r = await limiter.take(bucket, policy, c);
    } catch (err) {
      onError(err, req);
      if (failMode === 'closed') {
        res.setHeader('Retry-After', String(Math.max(1, Math.ceil(failRetryAfterMs / 1000))));
        return json(res, 503, { error: 'rate_limiter_unavailable', retry_after_ms: Math.max(1, Math.ceil(failRetryAfterMs)) });
      }
      return next();
    } finally {
      onLatency?.(performance.now() - t0);
    }
    for (const [field, value] of Object.entries(rateLimitHeaders(name, r, now()))) res.setHeader(field, value);
    res.setHeader('RateLimit-Policy', policyField);
    if (r.allowed) return next();
    return json(res, 429, { error: 'rate_limited', retry_after_ms: Math.max(1, Math.ceil(r.retryAfterUs / 1000)) });
  };
}

/**
 * The rate-limit fields of an answer, as every front end writes them
 * (internal/testdata/ratelimit-headers.json pins them): X-RateLimit-Limit,
 * -Remaining, -Reset (the Unix second, rounded up, at which the bucket is
 * full again), RateLimit `"name";r=R;t=T` (T: seconds until full, rounded
 * up), and on a denial only Retry-After (seconds, rounded up, never 0).
 * @param {string} name the limit's name
 * @param {{allowed: boolean, limit: number, remaining: number, retryAfterUs: number, resetAfterUs: number}} r
 *   the store's answer
 * @param {number} nowMs the clock, Unix ms
 * @returns {Record<string, string>}
 */
export function rateLimitHeaders(name, r, nowMs) {
  const h = {
    'X-RateLimit-Limit': String(r.limit),
    'X-RateLimit-Remaining': String(r.remaining),
    'X-RateLimit-Reset': String(Math.ceil((nowMs * 1000 + r.resetAfterUs) / 1e6)),
    RateLimit: `"${name}";r=${r.remaining};t=${ceilSeconds(r.resetAfterUs)}`,
  };
  if (!r.allowed) h['Retry-After'] = String(Math.max(1, ceilSeconds(r.retryAfterUs)));
  return h;
}

/**
 * Returns log(message, fields), which passes a record to logger unless one
 * was passed less than every ms ago by the clock now, as httplimit's log
 * throttle does (a token bucket of one, refilled once per interval; a clock
 * that steps back holds the records until it passes the last one's time
 * plus the interval). A record passed after some were held back carries
 * their count as fields.suppressed.
 * @param {(message: string, fields: object) => void} logger
 * @param {() => number} now Unix ms
 * @param {number} every ms
 */
export function logThrottle(logger, now, every) {
  let last = -Infinity;
  let suppressed = 0;
  return (message, fields) => {
    const t = now();
    if (t < last + every) {
      suppressed++;
      return;
    }
    last = t;
    const dropped = suppressed;
    suppressed = 0;
    logger(message, dropped > 0 ? { ...fields, suppressed: dropped } : fields);
  };
}

// ceilSeconds rounds µs up to whole seconds.
const ceilSeconds = (us) => (us <= 0 ? 0 : Math.ceil(us / 1e6));

// json writes body as httplimit's writeJSON does: with nosniff and a
// newline, and Content-Type exactly application/json (Express's res.set
// would add a charset).
function json(res, status, body) {
  const text = JSON.stringify(body) + '\n';
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Content-Length', String(Buffer.byteLength(text)));
  res.end(text);
}
