// What each rate-limit header means, as internal/testdata/ratelimit-headers.json
// pins it for every front end: each case's clock and store answer, through
// rateLimitHeaders and through the Express middleware itself, give exactly
// the case's headers (Retry-After only on a denial).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import express from 'express';

import { perMinute } from '../src/index.js';
import { rateLimit, rateLimitHeaders } from '../src/express.js';

const fixture = JSON.parse(readFileSync(new URL('../../internal/testdata/ratelimit-headers.json', import.meta.url), 'utf8'));
const FIELDS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit', 'Retry-After'];

// answer is the store's answer a case describes.
const answer = (c) => ({ allowed: c.allowed, limit: c.capacity, remaining: c.remaining, retryAfterUs: c.retry_after_us, resetAfterUs: c.reset_after_us });

test('the fixture has cases', () => {
  assert.ok(fixture.cases.length >= 6);
  for (const c of fixture.cases) for (const f of Object.keys(c.headers)) assert.ok(FIELDS.includes(f), `${c.case}: ${f}`);
});

for (const c of fixture.cases) {
  test(`rateLimitHeaders: ${c.case}`, () => {
    assert.deepEqual(rateLimitHeaders(c.name, answer(c), c.now_unix_ms), c.headers);
  });
}

test('the middleware writes each case exactly', async () => {
  const app = express();
  fixture.cases.forEach((c, i) => {
    // A limiter that gives the case's answer, and the case's clock.
    const limiter = { take: async () => answer(c) };
    app.use(`/${i}`, rateLimit({ limiter, policy: perMinute(1).burst(c.capacity), name: c.name, key: () => ({ class: 'user', id: 'u' }), now: () => c.now_unix_ms }));
    app.get(`/${i}`, (req, res) => res.json({ ok: true }));
  });
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  try {
    for (const [i, c] of fixture.cases.entries()) {
      const res = await fetch(`http://127.0.0.1:${server.address().port}/${i}`);
      assert.equal(res.status, c.allowed ? 200 : 429, c.case);
      const got = {};
      for (const f of FIELDS) if (res.headers.has(f)) got[f] = res.headers.get(f);
      assert.deepEqual(got, c.headers, c.case);
      await res.arrayBuffer();
    }
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
