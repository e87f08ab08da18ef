// The agent tools list a Yjs document's roots for a read that names none (the
// read tool, and history's `at`), as the Python tools do, and page a list
// longer than one result with offset and next_offset: the tools left the
// binary update out and named no root, so a model had to guess root names.
// The names come from the update itself (src/yroots.js), checked here
// against documents Yjs wrote, through a real server.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as Y from 'yjs';
import { MIN_MAX_RESULT_CHARS, SyncdClient } from '../src/index.js';
import { yjsRootNames } from '../src/yroots.js';
import { serverMissing, startServer } from './helpers.js';

const ROOTS = Array.from({ length: 300 }, (_, n) => `section-${String(n).padStart(4, '0')}`);

function encode(doc) {
  return Buffer.from(Y.encodeStateAsUpdate(doc)).toString('base64');
}

function byCodePoint(names) {
  return [...names].sort((a, b) => {
    const x = Array.from(a, (c) => c.codePointAt(0));
    const y = Array.from(b, (c) => c.codePointAt(0));
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
    return x.length - y.length;
  });
}

test('root names of every kind of content Yjs writes', () => {
  const doc = new Y.Doc();
  const names = ['body', 'default', 'm', 'list', 'rich', 'gone', 'sub', '😀', '\uffff', 'ключ'];
  doc.getText('body').insert(0, 'hello');
  doc.getText('body').insert(2, 'XX');
  doc.getMap('m').set('a', { x: [1, 2.5, null, true, 'q', new Uint8Array([1])], big: 2 ** 60 });
  doc.getMap('m').set('a', -5);
  doc.getArray('list').push([1, 'x', { k: 1.5 }, [undefined]]);
  const element = new Y.XmlElement('p');
  element.insert(0, [new Y.XmlText('hi')]);
  doc.getXmlFragment('default').insert(0, [element]);
  element.setAttribute('class', 'c');
  doc.getText('rich').insert(0, 'bold', { bold: true });
  doc.getText('rich').insertEmbed(1, { image: 'x' });
  doc.getText('gone').insert(0, 'abc');
  doc.getText('gone').delete(0, 3);
  doc.getMap('sub').set('d', new Y.Doc());
  doc.getText('😀').insert(0, 'a');
  doc.getText('\uffff').insert(0, 'a');
  doc.getMap('ключ').set('k', 'v');
  assert.deepEqual(yjsRootNames(Y.encodeStateAsUpdate(doc)), byCodePoint(names));
  assert.deepEqual(yjsRootNames(Y.encodeStateAsUpdate(new Y.Doc())), []);
  assert.equal(yjsRootNames(new Uint8Array([1, 2, 3])), null);
  assert.equal(yjsRootNames(new Uint8Array([1, 1, 0, 0, 4, 1, 5, 0xff, 0xfe])), null); // bad UTF-8
});

describe('root listing through the tools', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 7 }), namespace: 'ns1' });
  });
  after(() => server?.close());

  async function readAll(tools, name, args) {
    let whole = [];
    let offset = 0;
    for (let calls = 0; offset !== null; calls++) {
      assert.ok(calls < 1000, 'paging did not end');
      const page = await tools.execute(name, { ...args, offset });
      assert.ok(JSON.stringify(page).length <= MIN_MAX_RESULT_CHARS, `a page of ${JSON.stringify(page).length} characters`);
      assert.equal(page.truncated, true);
      assert.equal(page.offset, offset);
      assert.ok(page.next_offset === null || page.next_offset > offset, page.message);
      if (page.next_offset !== null) assert.ok(page.message.includes(`offset=${page.next_offset}`), page.message);
      whole = whole.concat(page.roots);
      offset = page.next_offset;
    }
    return whole;
  }

  test('many roots page to their end; a few come whole', async () => {
    const doc = new Y.Doc();
    for (const name of ROOTS) doc.getText(name).insert(0, 'x');
    doc.getArray('list').push(['a']);
    await client.apply('yd:many', { op: 'update', update: encode(doc) });
    const tools = client.agentTools([['yd:many', 'ydoc']], { maxResultChars: MIN_MAX_RESULT_CHARS });
    const expected = [...ROOTS, 'list'].sort();
    assert.deepEqual(await readAll(tools, 'service_read_yd_many', {}), expected);
    assert.deepEqual(await readAll(tools, 'service_history_yd_many', { at: 1 }), expected);
    const past = await tools.execute('service_read_yd_many', { offset: expected.length + 5 });
    assert.deepEqual(past.roots, []);
    assert.equal(past.next_offset, null);

    const small = new Y.Doc();
    small.getText('a').insert(0, '1');
    small.getMap('b').set('k', 2);
    await client.apply('yd:few', { op: 'update', update: encode(small) });
    const few = client.agentTools([['yd:few', 'ydoc']]);
    const listing = await few.execute('service_read_yd_few', {});
    assert.deepEqual(listing.roots, ['a', 'b']);
    assert.equal(listing.truncated, undefined);
    assert.equal(listing.value, undefined, 'the binary update is left out');
    assert.match(listing.message, /root=NAME/);
    const second = await few.execute('service_read_yd_few', { offset: 1 });
    assert.deepEqual(second.roots, ['b']);
    assert.equal(second.offset, 1);
    assert.equal(second.next_offset, null);
    assert.equal(second.total, 2);
    // A listed name reads.
    assert.deepEqual((await few.execute('service_read_yd_few', { root: 'b', as: 'map' })).value, { k: 2 });
  });
});
