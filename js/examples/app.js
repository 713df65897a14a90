// The article's Express app on this package: /api limited to a burst of 100
// and 2 requests per second per client, /api/feed answering {"ok":true}.
//
//   REDIS_URL=redis://127.0.0.1:6379 node examples/app.js
//   ab -n 1000 -c 200 -H "x-user-id: test-user" http://127.0.0.1:3000/api/feed
//
// The article keys by the client-supplied x-user-id header, which lets any
// client pick a fresh bucket per request: set TRUST_USER_HEADER=1 only
// behind a gateway that strips and sets it. Otherwise clients are keyed by
// req.user (your auth middleware), else by address. GET /stats (not limited)
// reports the limiter call's latency since the start: count, p50, p99, max.

import express from 'express';
import Redis from 'ioredis';

import { RateBucket, REDIS_OPTIONS, perSecond } from '../src/index.js';
import { ip, rateLimit, userOr } from '../src/express.js';

const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', REDIS_OPTIONS);
const limiter = new RateBucket(redis);
const byHeader = (req) => ({ class: 'user', id: req.get('x-user-id') ?? '' });
const latencies = [];

const app = express();
app.use(
  '/api',
  rateLimit({
    limiter,
    policy: perSecond(2).burst(100),
    key: process.env.TRUST_USER_HEADER === '1' ? byHeader : userOr(ip),
    onLatency: (ms) => latencies.push(ms),
  }),
);
app.get('/api/feed', (req, res) => res.json({ ok: true }));
app.get('/stats', (req, res) => {
  const s = [...latencies].sort((a, b) => a - b);
  const q = (f) => (s.length ? Number(s[Math.min(s.length - 1, Math.floor(f * s.length))].toFixed(3)) : 0);
  res.json({ calls: s.length, p50_ms: q(0.5), p99_ms: q(0.99), max_ms: q(1) });
});
const server = app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
process.on('SIGTERM', () => {
  server.close();
  redis.disconnect();
});
