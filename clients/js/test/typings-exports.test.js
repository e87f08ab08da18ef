// The values index.d.ts declares are the values the package exports, and the
// other way round: a class, function or constant declared but not exported
// type-checks (`import { X }`) and is undefined at run time.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import * as runtime from '../src/index.js';

const source = await readFile(new URL('../src/index.d.ts', import.meta.url), 'utf8');
const declared = [...source.matchAll(/^export (?:declare )?(?:abstract )?(?:class|function|const|let|var) (\w+)/gm)].map(
  (m) => m[1],
);

test('every value index.d.ts declares is exported, and every export is declared', () => {
  assert.ok(declared.length > 20, 'the declarations were found');
  const exported = Object.keys(runtime);
  assert.deepEqual(
    declared.filter((name) => !exported.includes(name)),
    [],
    'declared in index.d.ts, missing at run time',
  );
  assert.deepEqual(
    exported.filter((name) => !declared.includes(name)),
    [],
    'exported at run time, not declared in index.d.ts',
  );
});

test('Emitter is the base of the exported event sources', () => {
  assert.equal(typeof runtime.Emitter, 'function');
  const sub = new runtime.Subscription('gc:x', { resync: () => {} });
  assert.ok(sub instanceof runtime.Emitter);
  let seen = 0;
  const off = sub.on('synced', () => seen++);
  sub.markSynced();
  off();
  assert.equal(seen, 1);
});
