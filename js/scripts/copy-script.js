// Copies the Go package's script (redisstore/tokenbucket.lua) into this
// package before `npm pack` or `npm publish` (the prepack script), so the
// tarball carries the script it runs. Packing outside the repository (no
// redisstore/ beside js/) keeps the copy already here. test/package.test.js
// fails when the copy in js/ differs from the source.

import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const SOURCE = fileURLToPath(new URL('../../redisstore/tokenbucket.lua', import.meta.url));
export const COPY = fileURLToPath(new URL('../tokenbucket.lua', import.meta.url));

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (existsSync(SOURCE)) {
    const same = existsSync(COPY) && readFileSync(COPY).equals(readFileSync(SOURCE));
    if (!same) copyFileSync(SOURCE, COPY);
    console.log(`ratebucket: tokenbucket.lua ${same ? 'already matches' : 'copied from'} ${SOURCE}`);
  } else if (!existsSync(COPY)) {
    console.error(`ratebucket: neither ${SOURCE} nor ${COPY} exists: the package would ship no script`);
    process.exit(1);
  }
}
