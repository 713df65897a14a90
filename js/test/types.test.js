// The hand-written .d.ts files against the modules they describe: every
// export is declared, every declared value is exported and of its kind, and
// each class declares exactly its public methods and its properties exist.
// (No TypeScript compiler: the package takes no dependency for it.)

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import Redis from 'ioredis';

import * as index from '../src/index.js';
import * as expressEntry from '../src/express.js';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

// declarations parses a .d.ts: its exported values by kind, its exported
// types, and each class's methods and properties.
function declarations(file) {
  const text = readFileSync(new URL(`../src/${file}`, import.meta.url), 'utf8');
  const values = new Map();
  for (const [, kind, name] of text.matchAll(/^export declare (const|function|class) (\w+)/gm)) values.set(name, kind);
  const types = [...text.matchAll(/^export (?:type|interface) (\w+)/gm)].map((m) => m[1]);
  const classes = new Map();
  for (const [, name, body] of text.matchAll(/^export declare class (\w+)[^{]*\{\n([\s\S]*?)^\}/gm)) {
    const methods = [...body.matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]).filter((m) => m !== 'constructor');
    const props = [...body.matchAll(/^ {2}readonly (\w+)\??:/gm)].map((m) => m[1]);
    classes.set(name, { methods: methods.sort(), props });
  }
  return { values, types, classes };
}

const isClass = (v) => typeof v === 'function' && /^class\b/.test(Function.prototype.toString.call(v));

function checkEntry(mod, file, instances) {
  const { values, types, classes } = declarations(file);
  assert.deepEqual([...values.keys()].sort(), Object.keys(mod).sort(), `${file} declares exactly the exports`);
  for (const [name, kind] of values) {
    const v = mod[name];
    if (kind === 'class') assert.ok(isClass(v), `${name} is a class`);
    if (kind === 'function') assert.ok(typeof v === 'function' && !isClass(v), `${name} is a function`);
    if (kind === 'const') assert.notEqual(typeof v, 'function', `${name} is a value`);
  }
  for (const t of types) assert.ok(!(t in mod), `type ${t} shadows no value`);
  for (const [name, { methods, props }] of classes) {
    const own = Object.getOwnPropertyNames(mod[name].prototype).filter((m) => m !== 'constructor').sort();
    assert.deepEqual(methods, own, `${name}'s methods`);
    const obj = instances[name]?.();
    assert.ok(obj, `an instance of ${name} to check`);
    for (const p of props) assert.ok(p in obj, `${name}.${p} exists`);
  }
}

test('index.d.ts declares what src/index.js exports', () => {
  const client = new Redis({ lazyConnect: true, ...index.REDIS_OPTIONS });
  try {
    checkEntry(index, 'index.d.ts', {
      RateBucket: () => new index.RateBucket(client),
      Limiter: () => new index.Limiter(client, { capacity: 1, perSecond: 1 }),
      RateBucketError: () => new index.RateBucketError('RB_TIMEOUT', 'x'),
      Rate: () => index.perSecond(1),
      Policy: () => index.perSecond(1).burst(1),
    });
  } finally {
    client.disconnect();
  }
});

test('express.d.ts declares what src/express.js exports', () => {
  checkEntry(expressEntry, 'express.d.ts', {});
});

test('package.json points each entry at its types', () => {
  assert.equal(pkg.types, 'src/index.d.ts');
  assert.deepEqual(pkg.exports['.'], { types: './src/index.d.ts', default: './src/index.js' });
  assert.deepEqual(pkg.exports['./express'], { types: './src/express.d.ts', default: './src/express.js' });
});
