// How a call fails when Redis cannot answer, on real sockets: a refused
// connection fails at once with RB_CONNECT (nothing was sent); a hung
// server (redis-server stopped by SIGSTOP, or a listener that accepts and
// never answers) at the timeout, with RB_TIMEOUT when the call was written
// and RB_CONNECT when it never was. Elapsed bounds are the best of a few
// attempts: the machine is shared and noisy.

import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';

import Redis from 'ioredis';

import { RateBucket, REDIS_OPTIONS, perMinute } from '../src/index.js';
import { freePort, startRedis } from '../testutil/redis.js';

const policy = perMinute(1).burst(5);
const TIMEOUT_MS = 200;
const SLACK_MS = 10;

// attempts runs n calls of rb.take one after another; each must reject as
// want says. It returns the elapsed ms of each.
async function attempts(n, rb, want) {
  const took = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await assert.rejects(rb.take('k', policy), want);
    took.push(performance.now() - t0);
  }
  return took;
}

const fmt = (ms) => ms.map((m) => m.toFixed(1)).join(', ');
const connectError = { code: 'RB_CONNECT', message: /nothing was sent/ };

test('a refused connection fails at once with RB_CONNECT', async (t) => {
  const port = await freePort(); // nothing listens there
  const c = new Redis({ port, host: '127.0.0.1', ...REDIS_OPTIONS });
  c.on('error', () => {}); // the refusals ioredis reports while it retries
  try {
    const rb = new RateBucket(c, { timeoutMs: 1000 });
    const took = await attempts(5, rb, connectError);
    t.diagnostic(`refused: ${fmt(took)} ms`);
    assert.ok(Math.max(...took) < 1000, `every call within the 1000 ms timeout: ${fmt(took)}`);
    assert.ok(Math.min(...took) < 5, `a call while ioredis waits to retry answers at once: ${fmt(took)}`);
  } finally {
    c.disconnect();
  }
});

test('a server that went away fails at once with RB_CONNECT', async (t) => {
  const srv = await startRedis();
  const c = new Redis({ port: srv.port, host: '127.0.0.1', ...REDIS_OPTIONS, retryStrategy: () => 20 });
  c.on('error', () => {});
  try {
    const rb = new RateBucket(c, { timeoutMs: 1000 });
    assert.equal((await rb.take('k', policy)).allowed, true);
    const closed = new Promise((resolve) => c.once('close', resolve));
    await srv.stop();
    await closed;
    const took = await attempts(3, rb, connectError);
    t.diagnostic(`gone: ${fmt(took)} ms`);
    assert.ok(Math.min(...took) < 5, `answers at once: ${fmt(took)}`);
  } finally {
    c.disconnect();
  }
});

test('a stopped redis-server (SIGSTOP) fails at the timeout with RB_TIMEOUT', async (t) => {
  const srv = await startRedis();
  const c = new Redis({ port: srv.port, host: '127.0.0.1', ...REDIS_OPTIONS });
  try {
    const rb = new RateBucket(c, { timeoutMs: TIMEOUT_MS });
    await rb.take('k', policy, 0); // ready, script loaded
    process.kill(srv.pid, 'SIGSTOP');
    const took = await attempts(5, rb, { code: 'RB_TIMEOUT', message: /may have run/ });
    t.diagnostic(`SIGSTOP: ${fmt(took)} ms (timeout ${TIMEOUT_MS})`);
    assert.ok(Math.min(...took) >= TIMEOUT_MS - 1, `not before the timeout: ${fmt(took)}`);
    assert.ok(Math.min(...took) <= TIMEOUT_MS + SLACK_MS, `at the timeout + ${SLACK_MS} ms: ${fmt(took)}`);
  } finally {
    process.kill(srv.pid, 'SIGCONT');
    c.disconnect();
    await srv.stop();
  }
});

test('a server that accepts and never answers fails at the timeout with RB_CONNECT, and gets nothing after', async (t) => {
  // It answers nothing (not even ioredis's CLIENT SETINFO and INFO ready
  // check) until released; then every command, in order.
  let received = '';
  let released = false;
  const socks = new Set();
  const reply = (name) => {
    if (/^info$/i.test(name)) {
      const info = 'redis_version:7.0.0\r\nloading:0\r\n';
      return `$${info.length}\r\n${info}\r\n`;
    }
    return /^ping$/i.test(name) ? '+PONG\r\n' : '+OK\r\n';
  };
  const answer = (sock) => {
    const names = [...sock.buf.matchAll(/\*\d+\r\n\$\d+\r\n(\w+)\r\n/g)].map((m) => m[1]);
    for (const name of names.slice(sock.answered)) sock.write(reply(name));
    sock.answered = names.length;
  };
  const server = net.createServer((sock) => {
    socks.add(sock);
    sock.buf = '';
    sock.answered = 0;
    sock.on('error', () => {});
    sock.on('data', (d) => {
      received += d;
      sock.buf += d;
      if (released) answer(sock);
    });
  });
  const release = () => {
    released = true;
    socks.forEach(answer);
  };
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const c = new Redis({ port: server.address().port, host: '127.0.0.1', ...REDIS_OPTIONS });
  try {
    const rb = new RateBucket(c, { timeoutMs: TIMEOUT_MS });
    const took = await attempts(5, rb, { code: 'RB_CONNECT', message: new RegExp(`no connection ready within ${TIMEOUT_MS} ms`) });
    t.diagnostic(`hung listener: ${fmt(took)} ms (timeout ${TIMEOUT_MS})`);
    assert.ok(Math.min(...took) >= TIMEOUT_MS - 1, `not before the timeout: ${fmt(took)}`);
    assert.ok(Math.min(...took) <= TIMEOUT_MS + SLACK_MS, `at the timeout + ${SLACK_MS} ms: ${fmt(took)}`);
    // The connection becomes ready after every call gave up: none is sent then.
    const ready = new Promise((resolve) => c.once('ready', resolve));
    release();
    await ready;
    assert.equal(await c.ping(), 'PONG');
    assert.match(received, /ping/i);
    assert.doesNotMatch(received, /eval/i, 'no call was written, during or after its timeout');
  } finally {
    c.disconnect();
    await new Promise((resolve) => server.close(resolve));
  }
});
