// Real Redis servers for the tests, started as internal/redistest starts
// them for Go: redis-server on a free 127.0.0.1 port, its files in a temp
// dir, persistence off, killed when the test ends, and (through setpriv's
// parent-death signal, on Linux) when this process dies without cleaning up.

import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const PATIENCE_MS = 10_000;

/** A free loopback port; with bus, port+10000 (Cluster's bus) is free too. */
export async function freePort(bus = false) {
  for (;;) {
    const port = await listenFree(0);
    if (!bus || (port + 10000 < 65536 && (await listenFree(port + 10000).catch(() => 0)))) return port;
  }
}

function listenFree(port) {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

/** Sends one command to 127.0.0.1:port and returns the raw reply. */
export function rawCommand(port, ...args) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let out = '';
    sock.setTimeout(1000, () => sock.destroy(new Error('timeout')));
    sock.on('data', (d) => {
      out += d;
      if (out.endsWith('\r\n')) {
        sock.end();
        resolve(out);
      }
    });
    sock.on('error', reject);
    sock.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join(''));
  });
}

async function until(what, cond) {
  const end = Date.now() + PATIENCE_MS;
  for (;;) {
    if (await cond().catch(() => false)) return;
    if (Date.now() > end) throw new Error(`redis test server: ${what} not within ${PATIENCE_MS} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const setpriv = existsSync('/usr/bin/setpriv') && process.platform === 'linux';

/**
 * Starts redis-server on a free port; stop() kills it and removes its dir.
 * args are extra options, or a function of the server's dir returning them.
 */
export async function startRedis({ bus = false, args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'rbjs-'));
  const port = await freePort(bus);
  const argv = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no',
    '--logfile', join(dir, 'redis.log'), '--daemonize', 'no', '--protected-mode', 'no', ...(typeof args === 'function' ? args(dir) : args)];
  const child = setpriv
    ? spawn('setpriv', ['--pdeathsig', 'KILL', 'redis-server', ...argv], { stdio: 'ignore' })
    : spawn('redis-server', argv, { stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  await until(`PING on port ${port}`, async () => (await rawCommand(port, 'PING')) === '+PONG\r\n');
  return {
    port,
    host: '127.0.0.1',
    pid: child.pid, // redis-server's: setpriv execs it
    async stop() {
      process.removeListener('exit', kill);
      kill();
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Starts a local Redis Cluster of three masters; stop() kills every node. */
export async function startCluster() {
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    const args = (dir) => ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf'), '--cluster-node-timeout', '5000'];
    nodes.push(await startRedis({ bus: true, args }));
  }
  await run('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes']);
  for (const n of nodes) await until(`cluster_state:ok on ${n.port}`, async () => (await rawCommand(n.port, 'CLUSTER', 'INFO')).includes('cluster_state:ok'));
  return {
    nodes: nodes.map((n) => ({ host: n.host, port: n.port })),
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}

/**
 * Starts a redis-server with the clients every test file wants: rdb (built
 * with REDIS_OPTIONS, for the limiter), admin (plain, for setting up and
 * checking), rb (a RateBucket on rdb); stop() closes them and the server.
 */
export async function standalone() {
  const { RateBucket, REDIS_OPTIONS } = await import('../src/index.js');
  const { default: Redis } = await import('ioredis');
  const srv = await startRedis();
  const rdb = new Redis({ port: srv.port, ...REDIS_OPTIONS });
  const admin = new Redis({ port: srv.port });
  return {
    srv, rdb, admin, rb: new RateBucket(rdb),
    async stop() {
      rdb.disconnect();
      admin.disconnect();
      await srv.stop();
    },
  };
}
