// The type declarations (src/index.d.ts) against the implementation: no
// TypeScript compiler is installed, so esbuild parses the file (a syntax
// error fails here; types are not checked) and the unions that enumerate CRDT types and tool actions
// are compared with what the modules export. A type the server and the tools
// know but the declarations leave out (as `ydoc` once was) fails here.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { transform } from 'esbuild';
import { TOOL_ACTIONS, TYPES } from '../src/index.js';

const source = await readFile(new URL('../src/index.d.ts', import.meta.url), 'utf8');

/** The string literals of `export type NAME = 'a' | 'b' ...;`. */
function union(name) {
  const found = source.match(new RegExp(`export type ${name} = ([^;]+);`));
  assert.ok(found, `no type ${name} in index.d.ts`);
  const members = found[1].split('|').map((m) => m.trim());
  assert.ok(members.every((m) => /^'[a-z]+'$/.test(m)), `${name} is not a union of string literals`);
  return members.map((m) => m.slice(1, -1)).sort();
}

test('index.d.ts parses as TypeScript', async () => {
  // In an ambient module, as a .d.ts is read: declarations without bodies or
  // initializers are allowed there, and a syntax error still fails.
  await transform(`declare module '@syncd/client' {\n${source}\n}`, { loader: 'ts' });
  await assert.rejects(transform("declare module 'm' {\nexport type X = ;\n}", { loader: 'ts' }));
});

test('CrdtType names every type the tools know, ydoc included', () => {
  assert.deepEqual(union('CrdtType'), Object.keys(TOOL_ACTIONS).sort());
  assert.ok(union('CrdtType').includes('ydoc'));
});

test('ReplicaType is CrdtType less ydoc, and TYPES are the replica types', () => {
  assert.match(source, /export type ReplicaType = Exclude<CrdtType, 'ydoc'>;/);
  assert.deepEqual(union('CrdtType').filter((t) => t !== 'ydoc'), [...TYPES].sort());
});

test('ToolAction covers every action of TOOL_ACTIONS, and read', () => {
  const actions = new Set(['read', ...Object.values(TOOL_ACTIONS).flat()]);
  assert.deepEqual(union('ToolAction'), [...actions].sort());
});
