// Agent tools against a real server: a value too large for a model's context
// comes back as a page that says how to read on with `offset`, paging reads
// it all, and a Yjs document reads as text, JSON or XML by root
// (docs/clients.md#large-values, #yjs-documents).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as Y from 'yjs';
import { MIN_MAX_RESULT_CHARS, SyncdClient, SyncdError } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

const LIMIT = 2000;
const size = (result) => JSON.stringify(result).length;

async function readAll(tools, name, field, extra = {}) {
  const pages = [];
  let offset = 0;
  while (offset !== null) {
    const page = await tools.execute(name, { ...extra, offset });
    assert.ok(size(page) <= tools.maxResultChars, `a page of ${size(page)} characters`);
    pages.push(page[field]);
    offset = page.next_offset ?? null;
    assert.ok(pages.length < 1000);
  }
  return pages;
}

describe('bounded tool results against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 5 }), namespace: 'ns1' });
  });
  after(() => server?.close());

  test('a large set is paged, and paging reads it all', async () => {
    const elements = Array.from({ length: 900 }, (_, n) => `element-${String(n).padStart(5, '0')}`);
    await client.apply('big-set', elements.map((element) => ({ op: 'add', type: 'orset', element })));
    const tools = client.agentTools([['big-set', 'orset']], { maxResultChars: LIMIT });
    const first = await tools.execute('service_read_big_set', {});
    assert.equal(first.truncated, true);
    assert.ok(size(first) <= LIMIT);
    assert.equal(first.total, 900);
    assert.equal(first.unit, 'elements');
    assert.equal(first.next_offset, first.value.length);
    assert.match(first.message, new RegExp(`service_read_big_set and offset=${first.next_offset}`));
    assert.deepEqual((await readAll(tools, 'service_read_big_set', 'value')).flat(), elements);
    const past = await tools.execute('service_read_big_set', { offset: 5000 });
    assert.deepEqual([past.value, past.next_offset], [[], null]);
    await assert.rejects(tools.execute('service_read_big_set', { offset: -1 }), { code: 'invalid_op' });
    await assert.rejects(tools.execute('service_read_big_set', { ofset: 1 }), { code: 'invalid_op' });
    assert.throws(() => client.agentTools([['big-set', 'orset']], { maxResultChars: MIN_MAX_RESULT_CHARS - 1 }), TypeError);
  });

  test('the default limit bounds a long text, paged by characters', async () => {
    const text = Array.from({ length: 3000 }, (_, n) => `line ${n}: the quick brown fox 🦊\n`).join('');
    await client.apply('essay', { op: 'insert', type: 'rga', index: 0, text });
    const tools = client.agentTools([['essay', 'rga']]);
    const first = await tools.execute('service_read_essay', {});
    assert.ok(size(first) <= 16000);
    assert.equal(first.value, undefined);
    assert.ok(text.startsWith(first.text));
    assert.equal((await readAll(tools, 'service_read_essay', 'text')).join(''), text);
  });

  test('a history page keeps the newest changes that fit', async () => {
    const tools = client.agentTools([['note', 'lwwregister']], { maxResultChars: LIMIT });
    for (let n = 0; n < 4; n++) await client.set('note', String(n).repeat(700), { type: 'lwwregister' });
    const page = await tools.execute('service_history_note', {});
    assert.equal(page.truncated, true);
    assert.ok(size(page) <= LIMIT);
    assert.equal(page.ops[0].seq, 4);
    assert.equal(page.next, page.ops.at(-1).seq);
    const at = await tools.execute('service_history_note', { at: 1 });
    assert.equal(at.value, '0'.repeat(700));
    await assert.rejects(tools.execute('service_history_note', { offset: 2 }), { code: 'invalid_op' });
  });

  test('a read refused for another reason than absence throws instead of answering null', async () => {
    const reader = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 6, read: ['other'] }), namespace: 'ns1' });
    const tools = reader.agentTools([['big-set', 'orset']]);
    await assert.rejects(tools.execute('service_read_big_set', {}), (err) => err instanceof SyncdError && err.status === 403);
    assert.equal(await client.agentTools([['nothing-here', 'orset']]).execute('service_read_nothing_here', {}), null);
  });

  test('a Yjs document reads by root as text, JSON or XML, not as base64', async () => {
    const doc = new Y.Doc();
    doc.getText('body').insert(0, 'Hello, agent');
    doc.getMap('meta').set('title', 'Notes');
    const paragraph = new Y.XmlElement('paragraph');
    paragraph.insert(0, [new Y.XmlText('Rich')]);
    doc.getXmlFragment('default').insert(0, [paragraph]);
    const update = Buffer.from(Y.encodeStateAsUpdate(doc)).toString('base64');
    await client.apply('yd:notes', { op: 'update', update });
    const tools = client.agentTools([['yd:notes', 'ydoc']]);
    const read = tools.definitions.find((t) => t.name === 'service_read_yd_notes');
    assert.deepEqual(Object.keys(read.input_schema.properties), ['offset', 'root', 'as']);
    const plain = await tools.execute('service_read_yd_notes', {});
    assert.equal(plain.value, undefined);
    assert.equal(plain.state_vector, undefined);
    assert.match(plain.message, /root=NAME/);
    assert.equal((await tools.execute('service_read_yd_notes', { root: 'body' })).value, 'Hello, agent');
    assert.deepEqual((await tools.execute('service_read_yd_notes', { root: 'meta', as: 'map' })).value, { title: 'Notes' });
    assert.equal((await tools.execute('service_read_yd_notes', { root: 'default', as: 'xml' })).value, '<paragraph>Rich</paragraph>');
    assert.equal((await tools.execute('service_history_yd_notes', { at: 1, root: 'body' })).value, 'Hello, agent');
    await assert.rejects(tools.execute('service_read_yd_notes', { as: 'text' }), { code: 'invalid_op' });
    await assert.rejects(tools.execute('service_read_yd_notes', { root: 'body', as: 'html' }), { code: 'invalid_op' });
    assert.equal(await client.agentTools([['yd:none', 'ydoc']]).execute('service_read_yd_none', { root: 'body' }), null);
  });
});
