// RateBucket: token buckets in Redis shared with the Go package, through
// the same Lua script (redisstore/tokenbucket.lua, copied
// into this package as tokenbucket.lua by the prepack script and checked
// against the source by test/package.test.js) and the wire contract it
// implements (redisstore/WIRE.md).

import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { Policy } from './policy.js';

/** The wire contract version this package implements (redisstore/WIRE.md). */
export const WIRE_VERSION = 1;
/** The key prefix when none is given, as in Go. */
export const DEFAULT_PREFIX = 'rb:';
/** How long a call may take, in ms, when no timeout is given. */
export const DEFAULT_TIMEOUT_MS = 1000;
/** The longest key accepted, in bytes, without the prefix (store.DefaultMaxKeyLen). */
export const DEFAULT_MAX_KEY_LEN = 256;

/**
 * Where the script lives: this package's copy of the Go package's file
 * (redisstore/tokenbucket.lua), beside src/. It is read by each new
 * RateBucket.
 */
export const SCRIPT_PATH = new URL('../tokenbucket.lua', import.meta.url);

/**
 * ioredis options a standalone client must have (spread them into yours):
 * a call that was written and whose reply was lost may have charged the
 * bucket, so ioredis must not send it again after a reconnect; and a call
 * that gave up while waiting for a connection must not be sent later.
 */
export const REDIS_OPTIONS = Object.freeze({ autoResendUnfulfilledCommands: false, enableOfflineQueue: false });

/**
 * ioredis Cluster options a cluster client must have: as REDIS_OPTIONS for
 * each node, and no re-sending of a call whose connection closed
 * (retryDelayOnFailover 0). MOVED, ASK, TRYAGAIN and CLUSTERDOWN are still
 * followed: they say the script did not run.
 */
export const CLUSTER_OPTIONS = Object.freeze({
  enableOfflineQueue: false,
  retryDelayOnFailover: 0,
  redisOptions: Object.freeze({ autoResendUnfulfilledCommands: false }),
});

/**
 * An error of this package; `code` says which: RB_CORRUPT (the key holds
 * something that is not a bucket, with corrupt: 'keep' or on inspect),
 * RB_CONNECT (no connection to Redis: its last attempt failed, or none was
 * ready within the timeout; nothing was sent, nothing charged), RB_TIMEOUT
 * (the call was written and no reply came within its timeout: the script
 * may have run), RB_CROSSSLOT (multi-take keys in several Cluster slots),
 * RB_SCRIPT (the script refused its arguments: a bug), RB_CLOSED (the
 * client was closed; nothing was sent); and a settle's RB_HOLD_SETTLED,
 * RB_HOLD_EXPIRED, RB_HOLD_INVALID and RB_HOLD_POLICY (nothing charged or
 * given back).
 */
export class RateBucketError extends Error {
  /** @param {string} code @param {string} message @param {object} [options] */
  constructor(code, message, options) {
    super(message, options);
    this.name = 'RateBucketError';
    this.code = code;
  }
}

/**
 * Reads the script at path and checks that it speaks WIRE_VERSION.
 * @param {string | URL} [path]
 * @returns {{lua: string, sha: string}} the text and its SHA1 (EVALSHA's name)
 */
export function loadScript(path = SCRIPT_PATH) {
  const lua = readFileSync(path, 'utf8');
  const m = /^-- Wire contract: version (\d+) /m.exec(lua);
  if (!m || Number(m[1]) !== WIRE_VERSION) {
    throw new RateBucketError('RB_SCRIPT', `ratebucket: ${path} speaks wire version ${m ? m[1] : '(none)'}, this package ${WIRE_VERSION}`);
  }
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

// OWN is how many numbers of an op's own follow the per-key answers
// (WIRE.md, "Reply"): inspect's deficit, stamp and PTTL; reserve's delay,
// At, Units and Mark.
const OWN = { i: 3, v: 4, h: 1, e: 2 };

/** The longest a hold stays open, in µs (Go's algo.MaxHoldTTL: 24 hours). */
export const MAX_HOLD_TTL_US = 86_400_000_000;
/** The largest actual cost a settle accepts (Go's algo.MaxCapacity). */
const MAX_ACTUAL = 1e12;
// A settle's refusals by the script's status (WIRE.md, "Holds").
const SETTLE_ERRORS = {
  1: ['RB_HOLD_SETTLED', 'the hold is settled already, or was not made on this key'],
  2: ['RB_HOLD_EXPIRED', 'the hold is past its deadline: it settled at its estimate'],
  3: ['RB_HOLD_INVALID', 'the hold is not the one recorded'],
};

const KINDS = { 1: 'held another Redis type', 2: "held the other clock's format", 3: 'held a value that is not a bucket', 4: 'had a bad or missing expiry' };

/**
 * Buckets in Redis, shared with every other process (in Go or Node) that
 * uses the same Redis, prefix and keys. One script call per take, decided
 * on the Redis server's clock. Safe to share within a process.
 */
export class RateBucket {
  /**
   * @param {import('ioredis').Redis | import('ioredis').Cluster} client an
   *   ioredis client built with REDIS_OPTIONS (or CLUSTER_OPTIONS); the
   *   caller owns it and closes it
   * @param {object} [options]
   * @param {string} [options.prefix] put before every key; default "rb:"
   * @param {number} [options.timeoutMs] bound of each call; default 1000
   * @param {'repair'|'keep'} [options.corrupt] what a take does with a key
   *   that holds no bucket: 'repair' (default) takes it as an empty bucket,
   *   rewrites it and calls onRepair; 'keep' fails with RB_CORRUPT
   * @param {(key: string, err: RateBucketError) => void} [options.onRepair]
   *   told of each repaired key; default console.warn
   * @param {number} [options.maxKeyLen] longest key in bytes; default 256
   * @param {'keep-tokens'|'proportional'} [options.onPolicyChange] what a
   *   bucket written under another policy keeps at the first call under a
   *   new one (the wire contract's policy registry): its tokens, capped at
   *   the new capacity (default), or its fraction of a full bucket; as Go's
   *   redisstore.Config.OnPolicyChange, which every caller should share
   * @param {string | URL} [options.scriptPath] the script; default
   *   SCRIPT_PATH, the package's copy of the Go package's file
   */
  constructor(client, options = {}) {
    const { prefix = DEFAULT_PREFIX, timeoutMs = DEFAULT_TIMEOUT_MS, corrupt = 'repair', onRepair, maxKeyLen = DEFAULT_MAX_KEY_LEN, onPolicyChange = 'keep-tokens' } = options;
    checkClient(client);
    // As Go's ErrHashTagPrefix: a hash tag in the prefix would put every
    // bucket in one Cluster slot, and a lone brace would take the keys' own
    // hash tags apart.
    if (/[{}]/.test(prefix)) throw new TypeError(`ratebucket: prefix ${JSON.stringify(prefix)} contains a brace`);
    if (corrupt !== 'repair' && corrupt !== 'keep') throw new TypeError(`ratebucket: corrupt must be 'repair' or 'keep', not ${corrupt}`);
    const change = { 'keep-tokens': '', proportional: 'q' }[onPolicyChange];
    if (change === undefined) throw new TypeError(`ratebucket: onPolicyChange must be 'keep-tokens' or 'proportional', not ${onPolicyChange}`);
    this.change = change;
    const { lua, sha } = loadScript(options.scriptPath);
    this.client = client;
    this.prefix = prefix;
    this.timeoutMs = timeoutMs;
    this.keep = corrupt === 'keep' ? 'k' : '';
    this.onRepair = onRepair ?? ((key, err) => console.warn(`ratebucket: repaired a corrupt bucket: ${err.message}`));
    this.maxKeyLen = maxKeyLen;
    this.sha = sha;
    this.isCluster = Boolean(client.isCluster);
    // defineCommand is ioredis's EVALSHA with the NOSCRIPT fallback: EVAL of
    // the source, sent once, only after Redis said the script did not run.
    this.command = `ratebucket_${sha.slice(0, 12)}`;
    if (typeof client[this.command] !== 'function') client.defineCommand(this.command, { lua });
  }

  /** The Redis key of the bucket at key. @param {string} key */
  key(key) {
    return this.prefix + key;
  }

  /**
   * The policy registry (WIRE.md, "Policy changes") of the bucket at Redis
   * key bucket: "pol:" and the prefix, on a Cluster with a hash tag that
   * puts it in the bucket's slot. @param {string} bucket
   */
  registry(bucket) {
    const base = 'pol:' + this.prefix;
    return this.isCluster ? `${base}{${slotTags()[slot(bucket)]}}` : base;
  }

  /**
   * Takes cost tokens from the bucket at key, or denies with the exact wait.
   * A cost of 0 peeks.
   * @param {string} key
   * @param {Policy} policy
   * @param {number} [cost]
   * @returns {Promise<Result>}
   */
  async take(key, policy, cost = 1) {
    const reqs = [{ key, policy, cost }];
    const { now, results } = await this.#run('t', reqs);
    return { ...results[0], now };
  }

  /**
   * Gives n tokens back to the bucket at key, never above its capacity:
   * for a request that should not count after all (Go's Store.Refund).
   * @param {string} key
   * @param {Policy} policy
   * @param {number} n at most the capacity
   * @returns {Promise<TakeResult>}
   */
  async refund(key, policy, n) {
    const { now, results } = await this.#run('r', [{ key, policy, cost: n }]);
    return { ...results[0], now };
  }

  /**
   * Takes cost tokens now, even before they exist, if they exist within
   * maxWaitUs (and one bucket's refill): the caller proceeds after
   * delayUs. Refused, it charges nothing and has the exact retryAfterUs
   * (Go's Store.Reserve).
   * @param {string} key
   * @param {Policy} policy
   * @param {number} cost
   * @param {number} maxWaitUs
   * @returns {Promise<ReserveResult>}
   */
  async reserve(key, policy, cost, maxWaitUs) {
    if (!Number.isSafeInteger(maxWaitUs) || maxWaitUs < 0) throw new RangeError(`ratebucket: invalid maxWait ${maxWaitUs} µs`);
    const { now, results, extra } = await this.#run('v', [{ key, policy, cost, more: [maxWaitUs] }]);
    return { ...results[0], delayUs: Number(extra[0]), now };
  }

  /**
   * Takes estimate tokens now for work whose cost is known only after it
   * (Go's Store.Hold): admitted as a take of estimate would be (a hold of 0:
   * unless the bucket is in debt), with the hold that settle closes; open
   * for ttlUs (at most MAX_HOLD_TTL_US), after which it has settled at its
   * estimate. Refused, it charges nothing and hold is null.
   * @param {string} key
   * @param {Policy} policy
   * @param {number} estimate
   * @param {number} ttlUs
   * @returns {Promise<HoldResult>}
   */
  async hold(key, policy, estimate, ttlUs) {
    if (!Number.isSafeInteger(ttlUs) || ttlUs < 1 || ttlUs > MAX_HOLD_TTL_US) throw new RangeError(`ratebucket: invalid hold ttl ${ttlUs} µs`);
    const id = randomUUID();
    const { now, results, extra } = await this.#run('h', [{ key, policy, cost: estimate, more: [ttlUs], id }]);
    const hold = results[0].allowed ? { id, estimate, deadline: Number(extra[0]), policy: `${policy.capacity}:${policy.unit}:${policy.refill}` } : null;
    return { ...results[0], hold, now };
  }

  /**
   * Closes hold on key at the actual cost (Go's Store.Settle): the
   * difference from the estimate is given back, or the extra charged, into
   * at most one full bucket of debt (uncharged: the rest). Refused with a
   * RateBucketError: RB_HOLD_SETTLED, RB_HOLD_EXPIRED, RB_HOLD_INVALID,
   * RB_HOLD_POLICY.
   * @param {string} key
   * @param {Policy} policy
   * @param {Hold} hold
   * @param {number} actual
   * @returns {Promise<SettleResult>}
   */
  async settle(key, policy, hold, actual) {
    if (!Number.isSafeInteger(actual) || actual < 0 || actual > MAX_ACTUAL) throw new RangeError(`ratebucket: invalid actual cost ${actual}`);
    if (!hold || typeof hold.id !== 'string' || hold.id === '' || Buffer.byteLength(hold.id) > 64) throw new RateBucketError('RB_HOLD_INVALID', 'ratebucket: not a hold');
    if (hold.policy !== `${policy.capacity}:${policy.unit}:${policy.refill}`) throw new RateBucketError('RB_HOLD_POLICY', 'ratebucket: the hold was made under another policy');
    if (!Number.isSafeInteger(hold.estimate) || hold.estimate < 0 || hold.estimate > policy.capacity || !Number.isSafeInteger(hold.deadline) || hold.deadline < 1) {
      throw new RateBucketError('RB_HOLD_INVALID', 'ratebucket: not a hold');
    }
    const { now, results, extra } = await this.#run('e', [{ key, policy, cost: 0, more: [actual, hold.estimate, hold.deadline], id: hold.id, args: 3 }]);
    const refused = SETTLE_ERRORS[extra[0]];
    if (refused) throw new RateBucketError(refused[0], `ratebucket: key ${this.key(key)}: ${refused[1]}`);
    return { ...results[0], uncharged: Number(extra[1]), now };
  }

  /**
   * Takes from several buckets atomically: if every bucket admits, all are
   * charged; otherwise none is, each result is what its bucket alone would
   * answer, and denied and retryAfterUs name the longest wait. On a Cluster
   * the keys must share a hash slot (a hash tag: "{user:42}:burst").
   * @param {{key: string, policy: Policy, cost?: number}[]} reqs
   * @returns {Promise<MultiResult>}
   */
  async takeMulti(reqs) {
    if (reqs.length === 0) return { allowed: true, denied: -1, retryAfterUs: 0, results: [], now: 0 };
    const { now, results } = await this.#run('m', reqs.map((r) => ({ cost: 1, ...r })));
    let denied = -1;
    results.forEach((r, i) => {
      if (!r.allowed && (denied < 0 || r.retryAfterUs > results[denied].retryAfterUs)) denied = i;
    });
    return { allowed: denied < 0, denied, retryAfterUs: denied < 0 ? 0 : results[denied].retryAfterUs, results, now };
  }

  /**
   * The bucket at key as it stands now, without charging or writing it.
   * @param {string} key
   * @param {Policy} policy
   * @returns {Promise<Bucket>}
   */
  async inspect(key, policy) {
    const { now, results, extra } = await this.#run('i', [{ key, policy, cost: 0 }]);
    const [deficit, stamp, pttl] = extra;
    const exists = pttl !== -2;
    return {
      key: this.key(key), exists, now, tokens: results[0].remaining, limit: results[0].limit,
      fullInUs: results[0].resetAfterUs, deficit, stamp: exists ? stamp : 0, ttlMs: exists ? pttl : 0,
    };
  }

  /** Deletes the bucket at key: it is full again. @param {string} key */
  async reset(key) {
    checkKey(key, this.maxKeyLen);
    await this.#send(() => this.client.del(this.key(key)));
  }

  async #run(op, reqs) {
    reqs.forEach((r) => checkRequest(r, this.maxKeyLen));
    if (reqs.length > 1) {
      const keys = new Set(reqs.map((r) => r.key));
      if (keys.size !== reqs.length) throw new RangeError('ratebucket: a key is named twice');
      if (this.isCluster) {
        const slots = new Set(reqs.map((r) => slot(this.key(r.key))));
        if (slots.size > 1) throw new RateBucketError('RB_CROSSSLOT', 'ratebucket: keys in several Cluster slots; put a hash tag such as {user:42} in them');
      }
    }
    // The call's letters (WIRE.md, "The script"): left out for a take.
    const call = 's' + op + (op === 'i' ? '' : this.keep) + this.change;
    const first = this.key(reqs[0].key);
    const registry = this.registry(first);
    // A hold's record (WIRE.md, "Holds") goes between the bucket and the registry.
    const held = op === 'h' || op === 'e' ? [`${registry}:h:${reqs[0].id}:${first}`] : [];
    const args = [reqs.length + 1 + held.length, ...reqs.map((r) => this.key(r.key)), ...held, registry];
    if (call !== 'st') args.push(call);
    // One number a key, every one 1 (most takes): left out, as Go leaves it out.
    const ones = reqs.every((r) => r.cost === 1 && !r.more && !r.args);
    for (const { policy: p, cost, more = [], args: own } of reqs) {
      args.push(`${p.capacity}:${p.unit}:${p.refill}`, ...(own ? more : ones ? [] : [cost, ...more]));
    }
    let vals;
    try {
      vals = ints(await this.#send(() => this.client[`${this.command}Buffer`](...args)));
    } catch (err) {
      throw scriptError(err);
    }
    return this.#parse(vals, op, reqs);
  }

  #parse(vals, op, reqs) {
    const want = 2 + 4 * reqs.length + (OWN[op] ?? 0);
    if (!Array.isArray(vals) || vals.length < want || (vals.length - want) % 2 !== 0) {
      throw new RateBucketError('RB_SCRIPT', `ratebucket: script replied ${JSON.stringify(vals)}, want ${want} integers and pairs`);
    }
    const results = reqs.map((r, i) => {
      const v = vals.slice(2 + 4 * i, 6 + 4 * i);
      return { allowed: v[0] === 1, limit: r.policy.capacity, remaining: v[1], retryAfterUs: v[2], resetAfterUs: v[3] };
    });
    for (let i = want; i < vals.length; i += 2) {
      const key = this.key(reqs[vals[i] - 1].key);
      const why = KINDS[vals[i + 1]] ?? `was corrupt (kind ${vals[i + 1]})`;
      this.onRepair(key, new RateBucketError('RB_CORRUPT', `ratebucket: key ${key} ${why}; rewritten as an empty bucket`));
    }
    return { now: vals[0], results, extra: vals.slice(2 + 4 * reqs.length, want) };
  }

  #waiting = null; // one wait for the connection attempt under way, shared by every call

  // send calls write once the client is ready, bounded by the timeout: a
  // call never written fails with RB_CONNECT (nothing was sent), one written
  // and not answered in time with RB_TIMEOUT (it may have run), and its late
  // reply is dropped (never replayed). Nothing is written after the timeout.
  #send(write) {
    let written = false;
    let expired = false;
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => {
        expired = true;
        reject(written
          ? new RateBucketError('RB_TIMEOUT', `ratebucket: no reply within ${this.timeoutMs} ms (the script may have run)`)
          : this.#connectError(`no connection ready within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
    });
    const p = this.#ready().then(() => {
      if (expired) throw this.#connectError('timed out'); // nobody waits: send nothing
      written = true;
      return write();
    });
    p.catch(() => {}); // a reply after the timeout is nobody's
    return Promise.race([p, late]).finally(() => clearTimeout(timer));
  }

  // ready resolves when the client can write a call now. ioredis queues
  // nothing offline (REDIS_OPTIONS), so a client whose last connection
  // attempt failed (reconnecting: its retryStrategy waits before the next)
  // fails at once with RB_CONNECT rather than waiting for a connection that
  // may come; a client still connecting is waited for until that attempt
  // ends, bounded by the call's timeout.
  #ready() {
    const c = this.client;
    if (c.status === 'ready') return Promise.resolve();
    if (c.status === 'end') return Promise.reject(new RateBucketError('RB_CLOSED', 'ratebucket: the client is closed (nothing was sent)'));
    if (c.status !== 'wait' && c.status !== 'connecting' && c.status !== 'connect') {
      return Promise.reject(this.#connectError(`the last connection attempt failed (ioredis: ${c.status})`));
    }
    if (c.status === 'wait') c.connect().catch(() => {});
    this.#waiting ??= new Promise((resolve, reject) => {
      const done = (err) => {
        c.removeListener('ready', ok);
        c.removeListener('close', failed);
        c.removeListener('end', failed);
        this.#waiting = null;
        if (err) reject(err);
        else resolve();
      };
      const ok = () => done();
      const failed = () => done(this.#connectError('the connection attempt failed'));
      c.once('ready', ok);
      c.once('close', failed);
      c.once('end', failed);
    });
    return this.#waiting;
  }

  #connectError(why) {
    const o = this.client.options;
    const to = this.isCluster ? 'Redis Cluster' : `Redis at ${o.path ?? `${o.host ?? 'localhost'}:${o.port ?? 6379}`}`;
    return new RateBucketError('RB_CONNECT', `ratebucket: cannot reach ${to}: ${why} (nothing was sent)`);
  }
}

// ints reads the script's reply, big-endian 64-bit integers packed in one
// string (WIRE.md, "The script"): numbers, or past 2^53 their digits.
function ints(reply) {
  if (!Buffer.isBuffer(reply) || reply.length % 8 !== 0) return reply;
  const out = [];
  for (let i = 0; i < reply.length; i += 8) {
    const x = reply.readBigInt64BE(i);
    out.push(x >= -9007199254740992n && x <= 9007199254740992n ? Number(x) : String(x));
  }
  return out;
}

function checkClient(c) {
  const o = c?.options;
  if (!o) throw new TypeError('ratebucket: client is not an ioredis client');
  const bad = c.isCluster
    ? o.enableOfflineQueue !== false || o.retryDelayOnFailover !== 0 || o.redisOptions?.autoResendUnfulfilledCommands !== false
    : o.autoResendUnfulfilledCommands !== false || o.enableOfflineQueue !== false;
  if (bad) {
    const name = c.isCluster ? 'CLUSTER_OPTIONS' : 'REDIS_OPTIONS';
    throw new TypeError(`ratebucket: build the client with ratebucket's ${name}: ioredis would send a call again after a reconnect, charging the bucket twice`);
  }
}

function checkKey(key, max) {
  if (typeof key !== 'string' || key === '') throw new RangeError('ratebucket: empty key');
  const n = Buffer.byteLength(key);
  if (n > max) throw new RangeError(`ratebucket: key too long: ${n} bytes, at most ${max}`);
}

function checkRequest(r, max) {
  checkKey(r.key, max);
  if (!(r.policy instanceof Policy)) throw new TypeError('ratebucket: policy must be a Policy (perSecond(2).burst(100))');
  if (!Number.isSafeInteger(r.cost) || r.cost < 0) throw new RangeError(`ratebucket: invalid cost ${r.cost}`);
  if (r.cost > r.policy.capacity) throw new RangeError(`ratebucket: cost ${r.cost} exceeds capacity ${r.policy.capacity}`);
}

function scriptError(err) {
  if (err instanceof RateBucketError) return err;
  const msg = String(err?.message ?? err);
  if (msg.startsWith('RBCORRUPT')) return new RateBucketError('RB_CORRUPT', `ratebucket: ${msg}`, { cause: err });
  if (msg.startsWith('RBARG')) return new RateBucketError('RB_SCRIPT', `ratebucket: script refused its arguments (a bug): ${msg}`, { cause: err });
  return err;
}

/**
 * The part of key Redis Cluster hashes: the text between the first "{" and
 * the first "}" after it when not empty, else the whole key.
 * @param {string} key
 */
export function hashTag(key) {
  const i = key.indexOf('{');
  if (i >= 0) {
    const j = key.indexOf('}', i + 1);
    if (j > i + 1) return key.slice(i + 1, j);
  }
  return key;
}

/**
 * The Redis Cluster hash slot of key: CRC16/XMODEM of its hash tag (or the
 * whole key) modulo 16384.
 * @param {string} key
 */
let tags = null;

/**
 * For each Cluster slot, the first base-36 number counting up whose CRC16
 * lands in it (Go's redisstore does the same): a hash tag for that slot.
 * @returns {string[]}
 */
export function slotTags() {
  if (tags) return tags;
  tags = new Array(16384);
  for (let i = 0, left = 16384; left > 0; i++) {
    const tag = i.toString(36);
    const s = slot(tag);
    if (tags[s] === undefined) {
      tags[s] = tag;
      left--;
    }
  }
  return tags;
}

export function slot(key) {
  let crc = 0;
  for (const b of Buffer.from(hashTag(key))) {
    crc ^= b << 8;
    for (let k = 0; k < 8; k++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/**
 * @typedef {object} Result one bucket's answer (durations in µs, exact)
 * @property {boolean} allowed admitted and charged
 * @property {number} limit the capacity
 * @property {number} remaining whole tokens left
 * @property {number} retryAfterUs 0 when allowed; else the exact wait
 * @property {number} resetAfterUs until the bucket is full again
 * @property {number} [now] the server time the call was decided at, µs
 */
/**
 * @typedef {object} MultiResult
 * @property {boolean} allowed every bucket admitted, and all were charged
 * @property {number} denied index of the denying bucket with the longest wait, or -1
 * @property {number} retryAfterUs that wait
 * @property {Result[]} results one per request
 * @property {number} now the server time, µs
 */
/**
 * @typedef {object} Bucket what inspect finds
 * @property {string} key the Redis key
 * @property {boolean} exists Redis holds the key (absent: a full bucket)
 * @property {number} now the server time, µs
 * @property {number} tokens whole tokens available now
 * @property {number} limit the capacity
 * @property {number} fullInUs until the bucket is full
 * @property {number} deficit stored deficit in level units
 * @property {number} stamp stored stamp, µs (0 when absent)
 * @property {number} ttlMs the key's TTL (0 when absent, -1 no expiry)
 */
