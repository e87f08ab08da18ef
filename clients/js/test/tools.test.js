import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as Y from 'yjs';
import { buildTools, parseToolName, SyncdClient, toolName, toOpenAiTools } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

describe('tool names', () => {
  test('":", "/" and "-" become "_"', () => {
    assert.equal(toolName('read', 'page-views'), 'service_read_page_views');
    assert.equal(toolName('increment', 'gc:a/b-c'), 'service_increment_gc_a_b_c');
  });

  test('parsing maps "_" back to "-"', () => {
    assert.deepEqual(parseToolName('service_read_page_views'), { action: 'read', crdtId: 'page-views' });
    assert.deepEqual(parseToolName('service_set_theme'), { action: 'set', crdtId: 'theme' });
    assert.deepEqual(parseToolName('service_add_cart-42'), { action: 'add', crdtId: 'cart-42' });
    assert.equal(parseToolName('service_read_'), null);
    assert.equal(parseToolName('other_read_x'), null);
    assert.equal(parseToolName('service_delete_x'), null);
    assert.deepEqual(parseToolName('service_revert_doc'), { action: 'revert', crdtId: 'doc' });
  });

  test('definitions per type, in the input_schema shape', () => {
    const tools = buildTools([
      ['visits', 'gcounter'],
      ['balance', 'pncounter'],
      ['theme', 'lwwregister'],
      ['cart-42', 'orset'],
      ['room', 'presence'],
      ['doc', 'rga'],
      ['outline', 'tree'],
      ['draft', 'ydoc'],
    ]);
    assert.deepEqual(
      tools.map((t) => t.name),
      [
        'service_read_visits',
        'service_increment_visits',
        'service_history_visits',
        'service_read_balance',
        'service_increment_balance',
        'service_history_balance',
        'service_restore_balance',
        'service_revert_balance',
        'service_read_theme',
        'service_set_theme',
        'service_history_theme',
        'service_restore_theme',
        'service_revert_theme',
        'service_read_cart_42',
        'service_add_cart_42',
        'service_history_cart_42',
        'service_restore_cart_42',
        'service_revert_cart_42',
        'service_read_room',
        'service_history_room',
        'service_read_doc',
        'service_history_doc',
        'service_restore_doc',
        'service_revert_doc',
        'service_read_outline',
        'service_history_outline',
        'service_restore_outline',
        'service_revert_outline',
        'service_read_draft',
        'service_history_draft',
        'service_revert_draft',
      ],
    );
    const set = tools.find((t) => t.name === 'service_set_theme');
    assert.deepEqual(set.input_schema.required, ['value']);
    assert.ok('client_id' in set.input_schema.properties);
    const add = tools.find((t) => t.name === 'service_add_cart_42');
    assert.deepEqual(add.input_schema.required, ['element']);
    for (const t of tools) {
      assert.equal(t.input_schema.type, 'object');
      assert.match(t.name, /^[a-zA-Z0-9_-]{1,64}$/);
      assert.ok(t.description.length > 10);
    }
    const openai = toOpenAiTools(tools);
    assert.equal(openai[0].type, 'function');
    assert.deepEqual(openai[0].function.parameters, tools[0].input_schema);
  });

  for (const id of ['a/b', '', 'a b', 'é', 'x'.repeat(257), 7]) {
    test(`id ${JSON.stringify(id).slice(0, 20)} is refused`, () => {
      assert.throws(() => buildTools([[id, 'gcounter']]), TypeError);
    });
  }

  test('any valid CRDT id gets tools, named as the Python client names them', () => {
    const names = buildTools([['gc:visits', 'gcounter'], ['snake_case', 'orset'], ['dot.ted', 'lwwregister']]).map((t) => t.name);
    assert.ok(names.includes('service_read_gc_visits'));
    assert.ok(names.includes('service_add_snake_case'));
    assert.ok(names.includes('service_set_dot_ted'));
  });

  test('unknown types, repeated ids, clashing and long names are refused', () => {
    assert.throws(() => buildTools([['a', 'hashmap']]), /unknown CRDT type/);
    assert.throws(() => buildTools([['a', 'toString']]), /unknown CRDT type/);
    assert.throws(() => buildTools([['a', 'gcounter'], ['a', 'orset']]), /given twice/);
    assert.throws(() => buildTools([['gc:a-b', 'gcounter'], ['gc:a_b', 'gcounter']]), /duplicate tool name/);
    const longest = 64 - 'service_increment_'.length;
    assert.equal(buildTools([['x'.repeat(longest), 'gcounter']])[1].name.length, 64);
    assert.throws(() => buildTools([['x'.repeat(longest + 1), 'gcounter']]), /longer than 64/);
    assert.throws(() => buildTools(['ab']), /pairs/);
  });
});

describe('tools against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 5 }), namespace: 'ns1' });
  });
  after(() => server?.close());

  test('execute maps names back and sends the type in the op', async () => {
    const tools = client.agentTools([
      ['page-views', 'gcounter'],
      ['score', 'pncounter'],
      ['theme', 'lwwregister'],
      ['cart-42', 'orset'],
    ]);
    assert.equal(await tools.execute('service_read_page_views', {}), null);
    assert.equal((await tools.execute('service_increment_page_views', { amount: 3 })).ok, true);
    await tools.execute('service_increment_page_views');
    await tools.execute('service_increment_score', { amount: 2 });
    await tools.execute('service_set_theme', { value: { dark: true }, client_id: 5 });
    await tools.execute('service_add_cart_42', { element: 'apple' });

    const views = await tools.execute('service_read_page_views', {});
    assert.equal(views.type, 'gcounter');
    assert.equal(views.value, 4);
    assert.equal((await client.read('score')).type, 'pncounter');
    assert.deepEqual((await client.read('theme')).value, { dark: true });
    assert.deepEqual((await client.read('cart-42')).value, ['apple']);

    // The server's checks still apply: another client_id is forbidden.
    await assert.rejects(tools.execute('service_set_theme', { value: 1, client_id: 6 }), { code: 'forbidden' });
    await assert.rejects(tools.execute('service_add_other', { element: 1 }), { code: 'unknown_tool' });
    await assert.rejects(tools.execute('service_set_page_views', { value: 1 }), { code: 'unknown_tool' });
  });

  test('history, at and restore, as methods and as tools', async () => {
    await client.increment('hist', 5, { type: 'pncounter' });
    await client.decrement('hist', 2, { type: 'pncounter' });
    await client.increment('hist', 10, { type: 'pncounter' });
    const page = await client.history('hist', { limit: 2 });
    assert.deepEqual(page.ops.map((o) => o.seq), [3, 2]);
    assert.equal(page.next, 2);
    assert.equal(page.oldest, 0);
    assert.equal((await client.at('hist', 2)).value, 3);
    await assert.rejects(client.at('hist', 9), { code: 'bad_request', status: 400 });
    const restored = await client.restore('hist', 1, { opId: 'js-undo' });
    assert.equal(restored.restored, 1);
    assert.equal((await client.read('hist')).value, 5);
    assert.equal((await client.restore('hist', 1, { opId: 'js-undo' })).duplicate, true);

    const tools = client.agentTools([['hist', 'pncounter'], ['g', 'gcounter']]);
    const changes = await tools.execute('service_history_hist', { limit: 1 });
    assert.equal(changes.ops.length, 1);
    assert.equal((await tools.execute('service_history_hist', { at: 3 })).value, 13);
    assert.equal((await tools.execute('service_restore_hist', { seq: 3 })).ok, true);
    assert.equal((await client.read('hist')).value, 13);
    await assert.rejects(tools.execute('service_restore_g', { seq: 0 }), { code: 'unknown_tool' });
  });

  test('an agent with an origin, reviewed and reverted by tools', async () => {
    const agentClient = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 9 }), namespace: 'ns1' });
    const agent = agentClient.agentTools([['basket', 'orset']], { origin: 'agent:js-1' });
    const supervisor = client.agentTools([['basket', 'orset']]);
    await client.add('basket', 'milk', { type: 'orset' });
    await agent.execute('service_add_basket', { element: 'caviar' });
    await client.add('basket', 'bread', { type: 'orset' });
    const changes = await supervisor.execute('service_history_basket', { origin: 'agent:js-1' });
    assert.deepEqual(changes.ops.map((o) => [o.client_id, o.origin]), [[9, 'agent:js-1']]);
    assert.equal((await supervisor.execute('service_history_basket', { client_id: 5 })).ops.length, 2);
    const answer = await supervisor.execute('service_revert_basket', { origin: 'agent:js-1' });
    assert.equal(answer.matched, 1);
    assert.deepEqual((await client.read('basket')).value, ['bread', 'milk']);
    await assert.rejects(supervisor.execute('service_revert_basket', {}), { code: 'invalid_op' });
    assert.throws(() => client.agentTools([['basket', 'orset']], { origin: '' }), TypeError);
    // The methods: a batch's origin, a filtered page, a revert by client with an op id.
    await client.apply('notes', { op: 'insert', index: 0, text: 'hi', type: 'rga' });
    await client.apply('notes', [{ op: 'insert', index: 2, text: '!' }], { origin: 'bot' });
    assert.deepEqual((await client.history('notes', { origin: 'bot' })).ops.map((o) => o.seq), [2]);
    const reverted = await client.revert('notes', { clientId: 5, origin: 'bot', opId: 'js-r1' });
    assert.equal(reverted.applied, 1);
    assert.equal((await client.read('notes')).text, 'hi');
    assert.equal((await client.revert('notes', { origin: 'bot', opId: 'js-r1' })).duplicate, true);
    // null options are left out (the server refuses null as a field's value).
    const nulls = { clientId: null, origin: 'bot', sinceSeq: null, untilSeq: null, opId: 'js-r1' };
    assert.equal((await client.revert('notes', nulls)).duplicate, true);
    assert.equal((await client.restore('notes', 1, { opId: null })).ok, true);
    assert.throws(() => client.revert('notes', {}), TypeError);
    assert.throws(() => client.revert('notes', { clientId: null, origin: null }), TypeError);
    agentClient.close();
  });

  test("a Yjs document's agent task, reviewed and reverted by tools", async () => {
    const agentClient = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 9 }), namespace: 'ns1' });
    const agent = agentClient.agentTools([['draft', 'ydoc']], { origin: 'agent:yjs-1' });
    const supervisor = client.agentTools([['draft', 'ydoc']]);
    const human = new Y.Doc();
    const text = human.getText('content');
    const updates = [];
    human.on('update', (update) => updates.push(update));
    const send = (c, update, origin) =>
      c.apply('draft', { op: 'update', type: 'ydoc', update: Buffer.from(update).toString('base64') }, { origin });
    text.insert(0, 'Launch on Monday.');
    await send(client, updates.at(-1));
    // The agent edits a copy of the document; its update goes out under its origin.
    const copy = new Y.Doc();
    Y.applyUpdate(copy, Y.encodeStateAsUpdate(human));
    const before = Y.encodeStateVector(copy);
    copy.getText('content').insert(0, 'Summary: launch. ');
    await send(agentClient, Y.encodeStateAsUpdate(copy, before), 'agent:yjs-1');
    text.insert(text.length, ' Bring cake.');
    await send(client, updates.at(-1));
    const content = async () => {
      // The read's value is the whole document as one update, base64.
      const doc = new Y.Doc();
      Y.applyUpdate(doc, Buffer.from((await client.read('draft')).value, 'base64'));
      return doc.getText('content').toString();
    };
    assert.equal(await content(), 'Summary: launch. Launch on Monday. Bring cake.');

    const changes = await supervisor.execute('service_history_draft', { origin: 'agent:yjs-1' });
    assert.equal(changes.type, 'ydoc');
    assert.deepEqual(changes.ops.map((o) => [o.seq, o.client_id, o.origin, o.op.op]), [[2, 9, 'agent:yjs-1', 'update']]);
    await assert.rejects(agent.execute('service_restore_draft', { seq: 1 }), { code: 'unknown_tool' });
    const answer = await supervisor.execute('service_revert_draft', { origin: 'agent:yjs-1' });
    assert.equal(answer.matched, 1);
    assert.equal(await content(), 'Launch on Monday. Bring cake.');
    agentClient.close();
  });
});
