// A Yjs root whose name is as long as the service takes (256 characters)
// makes a page's own fields (the root, and the message that names it) nearly
// fill the smallest result limit: paging must still move on, never answer
// the same empty page with next_offset equal to its offset, nor crawl on
// one character a page.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as Y from 'yjs';
import { MIN_MAX_RESULT_CHARS, SyncdClient } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

const LONGEST_ROOT = 'r'.repeat(256); // the service's MAX_ROOT_NAME
const ID = `yd:${'n'.repeat(45)}`; // its longest tool name is 64 characters (MAX_TOOL_NAME_LENGTH)
const HISTORY = `service_history_yd_${'n'.repeat(45)}`;

describe('paging a text under a long root name', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 5 }), namespace: 'ns1' });
  });
  after(() => server?.close());

  test('every page moves on, and the pages read the whole text', async () => {
    const text = 'abcdefghij😀'.repeat(150);
    const doc = new Y.Doc();
    doc.getText(LONGEST_ROOT).insert(0, text);
    await client.apply(ID, { op: 'update', update: Buffer.from(Y.encodeStateAsUpdate(doc)).toString('base64') });
    const tools = client.agentTools([[ID, 'ydoc']], { maxResultChars: MIN_MAX_RESULT_CHARS });
    const pages = [];
    let offset = 0;
    while (offset !== null) {
      const page = await tools.execute(HISTORY, { at: 1, root: LONGEST_ROOT, offset });
      assert.ok(page.next_offset === null || page.next_offset > offset, `stuck at offset ${offset}: ${page.message}`);
      assert.ok(JSON.stringify(page).length <= MIN_MAX_RESULT_CHARS, `a page of ${JSON.stringify(page).length} characters`);
      assert.equal(page.root, LONGEST_ROOT);
      pages.push(page.value);
      offset = page.next_offset;
      assert.ok(pages.length <= 20, `${pages.length} pages for ${text.length} characters`);
    }
    assert.equal(pages.join(''), text);
  });

  test('a root name too long to leave room for any character still pages on, one character a page', async () => {
    // 256 control characters: 1,538 characters of JSON in the page's `root`
    // alone, over the smallest limit before the value has any room.
    const root = '\u0001'.repeat(256);
    const doc = new Y.Doc();
    doc.getText(root).insert(0, 'a😀c');
    const id = 'yd:escaped-root';
    await client.apply(id, { op: 'update', update: Buffer.from(Y.encodeStateAsUpdate(doc)).toString('base64') });
    const tools = client.agentTools([[id, 'ydoc']], { maxResultChars: MIN_MAX_RESULT_CHARS });
    const pages = [];
    let offset = 0;
    while (offset !== null) {
      const page = await tools.execute('service_read_yd_escaped_root', { root, offset });
      assert.ok(page.next_offset === null || page.next_offset > offset, `stuck at offset ${offset}`);
      pages.push(page.value);
      offset = page.next_offset;
      assert.ok(pages.length <= 3);
    }
    assert.deepEqual(pages, ['a', '😀', 'c']);
  });
});
