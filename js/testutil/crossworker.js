// The Node side of redisstore/crossruntime_test.go: it runs the calls the Go
// test sends, one JSON line each on stdin, through this package's public API,
// and answers each with one JSON line on stdout. The Go test interleaves them
// with its own calls on the same keys and replays every answer through algo.
//
//   node crossworker.js '{"cluster":false,"addrs":["127.0.0.1:6379"],"prefix":"rb:"}'
//
// First line out: {"sha": the script's SHA1}. Then per line in
// {"op":"t"|"m"|"i","reqs":[{"key","capacity","unit","refill","cost"}]}
// one line out: {"now","results":[{"allowed","limit","remaining","retryAfterUs","resetAfterUs"}]}
// or {"error": message}. A hold ("h", reqs[0].ttl µs) adds "hold"; a settle
// ("e", reqs[0].actual, and "hold" beside reqs) adds "uncharged", or
// "code" when the settle was refused.

import { createInterface } from 'node:readline';

import Redis from 'ioredis';

import { CLUSTER_OPTIONS, RateBucket, REDIS_OPTIONS, Rate } from '../src/index.js';

const cfg = JSON.parse(process.argv[2]);
const nodes = cfg.addrs.map((a) => ({ host: a.split(':')[0], port: Number(a.split(':')[1]) }));
const client = cfg.cluster ? new Redis.Cluster(nodes, CLUSTER_OPTIONS) : new Redis({ ...nodes[0], ...REDIS_OPTIONS });
const rb = new RateBucket(client, { prefix: cfg.prefix, timeoutMs: 10_000 });
const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');

// A policy from the wire's three integers: refill tokens every unit µs is
// already in lowest terms, so Rate.burst gives back the same three.
const policy = (r) => new Rate(r.refill, r.unit).burst(r.capacity);

out({ sha: rb.sha });
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const { op, reqs, hold } = JSON.parse(line);
  try {
    if (op === 'h') {
      const r = await rb.hold(reqs[0].key, policy(reqs[0]), reqs[0].cost, reqs[0].ttl);
      out({ now: r.now, results: [r], hold: r.hold });
    } else if (op === 'e') {
      try {
        const r = await rb.settle(reqs[0].key, policy(reqs[0]), hold, reqs[0].actual);
        out({ now: r.now, results: [r], uncharged: r.uncharged });
      } catch (err) {
        if (!String(err?.code).startsWith('RB_HOLD_')) throw err;
        out({ code: err.code });
      }
    } else if (op === 't') {
      const r = await rb.take(reqs[0].key, policy(reqs[0]), reqs[0].cost);
      out({ now: r.now, results: [r] });
    } else if (op === 'm') {
      const m = await rb.takeMulti(reqs.map((r) => ({ key: r.key, policy: policy(r), cost: r.cost })));
      out({ now: m.now, results: m.results });
    } else {
      const b = await rb.inspect(reqs[0].key, policy(reqs[0]));
      out({ now: b.now, results: [{ allowed: true, limit: reqs[0].capacity, remaining: b.tokens, retryAfterUs: 0, resetAfterUs: b.fullInUs }] });
    }
  } catch (err) {
    out({ error: String(err?.stack ?? err) });
  }
}
client.disconnect();
