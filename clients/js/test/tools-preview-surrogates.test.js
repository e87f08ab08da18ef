// An element or a change too large for a page of its own is shown by the
// start of its JSON (`preview`, `op_preview`): cut by code points, as the
// Python tools cut it, never between the two halves of a surrogate pair.
// Cut by UTF-16 units, an emoji at the cut left a lone surrogate, which a
// host cannot send on as UTF-8 (Python's json refuses to encode it).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MIN_MAX_RESULT_CHARS, SyncdClient } from '../src/index.js';
import { PREVIEW_CHARS } from '../src/bounded.js';
import { serverMissing, startServer } from './helpers.js';

// The element's JSON is `"` then these: the emoji's two UTF-16 units are at
// PREVIEW_CHARS - 1 and PREVIEW_CHARS, on either side of a UTF-16 cut.
const LARGE = `${'x'.repeat(PREVIEW_CHARS - 2)}😀${'y'.repeat(2 * MIN_MAX_RESULT_CHARS)}`;
const expected = Array.from(JSON.stringify(LARGE)).slice(0, PREVIEW_CHARS).join('');

describe('previews of values too large to show', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  let tools;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 3 }), namespace: 'ns1' });
    tools = client.agentTools([['or:big', 'orset']], { maxResultChars: MIN_MAX_RESULT_CHARS });
    await client.add('or:big', LARGE);
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  test('an element too large for a page', async () => {
    const page = await tools.execute('service_read_or_big', {});
    const { preview, json_chars: chars } = page.too_large;
    assert.ok(preview.isWellFormed(), 'a lone surrogate in the preview');
    assert.equal(preview, expected);
    assert.equal(chars, Array.from(JSON.stringify(LARGE)).length);
  });

  test('a change too large for a history page', async () => {
    const page = await tools.execute('service_history_or_big', {});
    const change = page.ops[0];
    assert.ok(change.op_preview.isWellFormed(), 'a lone surrogate in the op preview');
    assert.equal(Array.from(change.op_preview).length, PREVIEW_CHARS);
  });
});
