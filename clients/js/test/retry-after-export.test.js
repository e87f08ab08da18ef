// RETRY_AFTER_MAX_MS (the longest Retry-After a stream reconnect waits) is
// part of the public surface as the other constants are: exported from the
// package's entry point with the value the stream uses, and declared in
// index.d.ts with its literal type.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import * as runtime from '../src/index.js';
import { RETRY_AFTER_MAX_MS } from '../src/sse.js';

test('RETRY_AFTER_MAX_MS is exported from the package entry point', () => {
  assert.equal(runtime.RETRY_AFTER_MAX_MS, RETRY_AFTER_MAX_MS);
  assert.equal(runtime.RETRY_AFTER_MAX_MS, 10_000);
});

test('index.d.ts declares RETRY_AFTER_MAX_MS', async () => {
  const source = await readFile(new URL('../src/index.d.ts', import.meta.url), 'utf8');
  assert.match(source, /^export const RETRY_AFTER_MAX_MS: 10000;$/m);
});
