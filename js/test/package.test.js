// The package as a user gets it: npm pack's tarball, installed in an empty
// folder outside the repository, run there against a real redis-server; and
// the script it carries, which must be the Go package's file byte for byte.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { COPY, SOURCE } from '../scripts/copy-script.js';
import { SCRIPT_PATH } from '../src/index.js';
import { startRedis } from '../testutil/redis.js';

const run = promisify(execFile);
const js = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(js, 'package.json'), 'utf8'));

test("the package's tokenbucket.lua is redisstore's, byte for byte", () => {
  assert.equal(fileURLToPath(SCRIPT_PATH), COPY, 'the package loads its own copy');
  assert.ok(readFileSync(COPY).equals(readFileSync(SOURCE)),
    'js/tokenbucket.lua differs from redisstore/tokenbucket.lua: run `node scripts/copy-script.js` in js/ (npm pack does) and commit the copy');
});

test('package.json publishes the script', () => {
  assert.equal(pkg.private, undefined);
  assert.equal(pkg.scripts.prepack, 'node scripts/copy-script.js');
  assert.ok(pkg.files.includes('tokenbucket.lua'));
});

// The smoke test run in the folder the tarball was installed in: the
// package's own entry points, resolved by name, on a real server.
const SMOKE = `
import { fileURLToPath } from 'node:url';
import Redis from 'ioredis';
import { Limiter, REDIS_OPTIONS, SCRIPT_PATH, perMinute } from '@ratebucket/ratebucket';
import { rateLimit, userOr, ip } from '@ratebucket/ratebucket/express';

const redis = new Redis({ port: Number(process.argv[2]), ...REDIS_OPTIONS });
const lim = new Limiter(redis, perMinute(1).burst(2));
const allowed = [];
for (let i = 0; i < 3; i++) allowed.push((await lim.allow('smoke')).allowed);
const mw = rateLimit({ limiter: lim.bucket, policy: lim.policy, key: userOr(ip) });
console.log(JSON.stringify({ allowed, script: fileURLToPath(SCRIPT_PATH), middleware: typeof mw }));
redis.disconnect();
`;

test('npm pack gives a tarball that installs in an empty folder and runs', async (t) => {
  const t0 = performance.now();
  const packDir = mkdtempSync(join(tmpdir(), 'rbjs-pack-'));
  const appDir = realpathSync(mkdtempSync(join(tmpdir(), 'rbjs-app-')));
  const srv = await startRedis();
  try {
    const env = { ...process.env, npm_config_loglevel: 'error', npm_config_update_notifier: 'false' };
    await run('npm', ['pack', '--pack-destination', packDir], { cwd: js, env });
    const [tarball] = readdirSync(packDir);
    assert.equal(tarball, 'ratebucket-ratebucket-0.1.0.tgz'.replace('0.1.0', pkg.version));
    const { stdout: list } = await run('tar', ['tzf', join(packDir, tarball)]);
    assert.deepEqual(list.trim().split('\n').map((f) => f.replace(/^package\//, '')).sort(),
      ['README.md', 'package.json', 'src/express.d.ts', 'src/express.js', 'src/index.d.ts', 'src/index.js', 'src/limiter.js', 'src/policy.js',
        'src/ratebucket.js', 'tokenbucket.lua']);
    const tPack = performance.now();

    writeFileSync(join(appDir, 'package.json'), '{"name":"smoke","private":true,"type":"module"}\n');
    // Dependencies come from the npm cache that npm ci filled.
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(packDir, tarball)], { cwd: appDir, env })
      .catch((err) => assert.fail(`npm install of the tarball failed (it may have needed the network): ${err.stderr || err.message}`));
    const tInstall = performance.now();

    writeFileSync(join(appDir, 'smoke.js'), SMOKE);
    const { stdout } = await run(process.execPath, ['smoke.js', String(srv.port)], { cwd: appDir });
    const got = JSON.parse(stdout);
    assert.deepEqual(got.allowed, [true, true, false]);
    assert.equal(got.script, join(appDir, 'node_modules/@ratebucket/ratebucket/tokenbucket.lua'), 'the script comes from the installed package');
    assert.equal(got.middleware, 'function');
    const tSmoke = performance.now();
    t.diagnostic(`pack ${(tPack - t0).toFixed(0)} ms, install ${(tInstall - tPack).toFixed(0)} ms, smoke ${(tSmoke - tInstall).toFixed(0)} ms`);
  } finally {
    await srv.stop();
    rmSync(packDir, { recursive: true, force: true });
    rmSync(appDir, { recursive: true, force: true });
  }
});
