// The README's examples, run as they stand: the first js block under
// "## Use" and under "## Express" in README.md, their imports resolved by
// the package's own name, on a real redis-server. The Limiter admits and
// reserves; an Express client gets the burst, then 429s.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { freePort, startRedis } from '../testutil/redis.js';

const js = fileURLToPath(new URL('..', import.meta.url));

/** The first ```js block after the heading in README.md. */
function readmeBlock(heading) {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const at = readme.indexOf(`\n${heading}\n`);
  assert.ok(at >= 0, `README.md has no ${heading}`);
  const m = /\n```js\n([\s\S]*?)\n```\n/.exec(readme.slice(at));
  assert.ok(m, `no js block under ${heading}`);
  return m[1];
}

test("the README's Limiter example admits, refunds and reserves", async () => {
  const srv = await startRedis();
  try {
    const child = spawn(process.execPath, ['--input-type=module'], {
      cwd: js,
      env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${srv.port}` },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let stderr = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.stdin.end(readmeBlock('## Use'));
    assert.equal(await exited, 0, stderr);
    assert.deepEqual(JSON.parse(out), { allowed: true, limit: 100, remaining: 99, delayUs: 0 });
  } finally {
    await srv.stop();
  }
});

test("the README's Express example admits the burst, then answers 429", async (t) => {
  const code = readmeBlock('## Express');
  const srv = await startRedis();
  const port = await freePort();
  // Read from stdin with js/ as its folder, so that '@ratebucket/ratebucket'
  // resolves to this package (a package may import itself by name).
  const child = spawn(process.execPath, ['--input-type=module'], {
    cwd: js,
    env: { ...process.env, REDIS_URL: `redis://127.0.0.1:${srv.port}`, PORT: String(port) },
    stdio: ['pipe', 'inherit', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.stdin.end(code);
  try {
    const url = `http://127.0.0.1:${port}/api/feed`;
    const end = Date.now() + 10_000;
    let first;
    while (!first) {
      first = await fetch(url).catch(() => null);
      if (!first) {
        assert.equal(child.exitCode, null, `the example exited: ${stderr}`);
        assert.ok(Date.now() < end, `the example did not listen within 10 s: ${stderr}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    const statuses = [first.status];
    const res = [first];
    for (let i = 0; i < 11; i++) {
      const r = await fetch(url);
      statuses.push(r.status);
      res.push(r);
    }
    assert.deepEqual(statuses, [...Array(10).fill(200), 429, 429]);
    assert.deepEqual(await res[0].json(), { ok: true });
    assert.equal(res[9].headers.get('x-ratelimit-remaining'), '0');
    assert.equal(res[10].headers.get('retry-after'), '6');
    assert.match(await res[10].text(), /^\{"error":"rate_limited","retry_after_ms":\d+\}\n$/);
    t.diagnostic(`statuses ${statuses.join(' ')}`);
  } finally {
    child.kill('SIGKILL');
    await exited;
    await srv.stop();
  }
});
