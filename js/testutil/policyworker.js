// The Node side of redisstore/crossruntime_test.go's TestCrossRuntimePolicy:
// it builds each policy the Go test sends, one JSON line each on stdin, with
// this package's Rate and Policy, and answers each with one JSON line on
// stdout, so the test can hold the reduction to algo.Policy's.
//
//   in:  {"capacity","tokens","periodUs"}
//   out: {"capacity","unit","refill","fillTimeUs"} or {"error": message}
//
// It needs no Redis: policy.js computes before anything is sent.

import { createInterface } from 'node:readline';

import { Rate } from '../src/policy.js';

const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');

for await (const line of createInterface({ input: process.stdin })) {
  const { capacity, tokens, periodUs } = JSON.parse(line);
  try {
    const p = new Rate(tokens, periodUs).burst(capacity);
    out({ capacity: p.capacity, unit: p.unit, refill: p.refill, fillTimeUs: p.fillTimeUs() });
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    out({ error: err.message });
  }
}
