// A pair whose type is not the one its id's prefix fixes (['gc:x', 'orset']:
// gc: is a gcounter) is refused when the tools are built, as the Python tools
// refuse it: such tools described the wrong kind of value, and the server
// refused every op of them (type_mismatch).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildTools } from '../src/index.js';

test('a type the prefix contradicts is refused', () => {
  for (const [id, type] of [['gc:x', 'orset'], ['yd:notes', 'gcounter'], ['rg:text', 'lwwregister']]) {
    assert.throws(() => buildTools([[id, type]]), (err) => err instanceof TypeError && /prefix/.test(err.message) && err.message.includes(type));
  }
});

test('the type the prefix fixes, and ids without a known prefix, are built', () => {
  const tools = buildTools([['gc:x', 'gcounter'], ['notes', 'rga'], ['ab:c', 'orset'], ['yd:d', 'ydoc']]);
  assert.ok(tools.some((tool) => tool.name === 'service_increment_gc_x'));
  assert.ok(tools.some((tool) => tool.name === 'service_read_yd_d'));
});
