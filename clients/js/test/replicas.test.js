// Replicas fed by real deltas (WebSocket msgpack, WebSocket JSON, SSE) must
// show exactly what the server reads back.

import assert from 'node:assert/strict';
import { encode } from '@msgpack/msgpack';
import { after, before, describe, test } from 'node:test';
import { createReplica, decodeSseData, RgaReplica, SseParser, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const SCRIPTS = {
  'gc:hits': [{ op: 'increment' }, { op: 'increment', amount: 41 }],
  'pn:score': [{ op: 'increment', amount: 5 }, { op: 'decrement', amount: 8 }, { op: 'increment' }],
  'or:tags': [
    { op: 'add', element: 'a' },
    { op: 'add', element: { k: [1, 2], b: 'é' } },
    { op: 'add', element: 'a' },
    { op: 'remove', element: 'b' },
    { op: 'add', element: 3 },
    { op: 'remove', element: 3 },
  ],
  'lw:title': [{ op: 'set', value: 'one' }, { op: 'set', value: { two: 2 } }],
  'pr:room': [{ op: 'update', data: { name: 'x' } }, { op: 'update', data: { name: 'y' }, ttl_ms: 60000 }],
  'rg:doc': [
    { op: 'insert', index: 0, text: 'héllo 😀 world' },
    { op: 'delete', index: 1, count: 2 },
    { op: 'insert', index: 3, text: 'XY' },
    { op: 'insert', after: null, values: [1, { v: 2 }] },
  ],
  'tr:outline': [
    { op: 'add', id: 'a', parent: 'root', pos: 'b' },
    { op: 'add', id: 'b', parent: 'root', pos: 'a', data: { t: 1 } },
    { op: 'add', id: 'c', parent: 'a' },
    { op: 'move', id: 'c', parent: 'b' },
    { op: 'update', id: 'a', data: { t: 2 } },
    { op: 'delete', id: 'b' },
  ],
};

function plain(view) {
  // Views compare without the expiry map of presence (same data, same clock).
  const { expires_at, ...rest } = view;
  return rest;
}

describe('RgaReplica', () => {
  test('state with tombstones and code points', () => {
    const r = RgaReplica.fromState({ runs: [[1, 1, null, 'a😀'], [1, 3, [1, 2], 2], [2, 5, [1, 4], ['x', 7]]] });
    assert.deepEqual(r.values(), ['a', '😀', 'x', 7]);
    assert.equal(r.length, 4);
    assert.deepEqual(r.ids(), ['1@1', '2@1', '5@2', '6@2']);
    assert.equal(r.indexOf('5@2'), 2);
    assert.equal(r.indexOf('3@1'), -1);
  });

  test('concurrent inserts at one place order by higher counter, then higher client', () => {
    const r = new RgaReplica();
    r.applyDelta({ op: 'insert', after: null, client: 1, counter: 1, text: 'a' });
    r.applyDelta({ op: 'insert', after: [1, 1], client: 2, counter: 2, text: 'b' });
    r.applyDelta({ op: 'insert', after: [1, 1], client: 3, counter: 2, text: 'c' });
    r.applyDelta({ op: 'insert', after: [1, 1], client: 1, counter: 3, text: 'de' });
    assert.equal(r.text(), 'adecb');
    r.applyDelta({ op: 'insert', after: [1, 1], client: 1, counter: 3, text: 'de' }); // idempotent
    r.applyDelta({ op: 'delete', ranges: [[1, 3, 2]] });
    r.applyDelta({ op: 'delete', ranges: [[1, 3, 2]] });
    assert.equal(r.text(), 'acb');
    assert.throws(() => r.applyDelta({ op: 'insert', after: [9, 9], client: 1, counter: 9, text: 'z' }));
  });

  test('the other types start empty', () => {
    assert.deepEqual(createReplica('gcounter').view(), { value: 0, counts: {} });
    assert.deepEqual(createReplica('orset').view(), { value: [] });
    assert.deepEqual(createReplica('tree').view(), { value: { id: 'root', data: {}, children: [] } });
    assert.throws(() => createReplica('nope'), TypeError);
  });
});

describe('LWWRegisterReplica', () => {
  test('a tie on time and client keeps the greater value by code point, as the server does', () => {
    const r = createReplica('lwwregister');
    r.applyDelta({ timestamp: 5, client_id: 1, value: '\u{1F600}' });
    r.applyDelta({ timestamp: 5, client_id: 1, value: '\uffff' }); // greater in UTF-16 units only
    assert.equal(r.view().value, '\u{1F600}');
    r.applyDelta({ timestamp: 5, client_id: 1, value: '\u{1F601}' });
    assert.equal(r.view().value, '\u{1F601}');
  });
});

describe('SSE decoding', () => {
  test('parser splits events and skips comments', () => {
    const p = new SseParser();
    assert.deepEqual(p.feed(': ping\n\ndata: YQ'), []);
    assert.deepEqual(p.feed('==\n\ndata: Yg==\r\n\r\n'), ['YQ==', 'Yg==']);
  });

  test('base64 msgpack delta', () => {
    const delta = { kind: 'op', seq: 2, op: { op: 'increment', count: 2 } };
    const b64 = Buffer.from(encode(delta)).toString('base64');
    assert.deepEqual(decodeSseData(b64), delta);
  });
});

describe('replicas against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let client;
  before(async () => {
    // One token makes every request here, subscribes included (they count
    // against its rate limit): this suite checks replicas, not the limit.
    server = await startServer({ SERVICE_RATE_LIMIT: '100000' });
    client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 11 }), namespace: 'ns1' });
  });
  after(async () => {
    client?.close();
    await server?.close();
  });

  for (const encoding of ['msgpack', 'json']) {
    test(`WebSocket (${encoding}) replicas equal the server's reads`, async () => {
      const ws = new SyncdClient(
        { baseUrl: server.url, token: client.config.token, namespace: 'ns1' },
        { socket: { encoding } },
      );
      const ids = Object.keys(SCRIPTS).map((id) => `${id}-${encoding}`);
      const subs = ids.map((id) => ws.subscribe(id));
      await eventually(() => subs.every((s) => s.synced), 5000, 'snapshots');
      for (const [i, id] of ids.entries()) {
        for (const op of SCRIPTS[Object.keys(SCRIPTS)[i]]) await client.apply(id, op);
      }
      for (const [i, id] of ids.entries()) {
        const read = await client.read(id);
        await eventually(() => subs[i].seq === read.seq, 5000, `${id} seq`);
        const { id: _, type, seq, epoch, ...view } = read;
        assert.equal(subs[i].type, type);
        assert.equal(subs[i].epoch, epoch);
        assert.deepEqual(plain(subs[i].view()), plain(view), id);
      }
      ws.close();
      // A late subscriber starts from the snapshot (tombstones and all) and sees the same.
      const other = new SyncdClient({ baseUrl: server.url, token: client.config.token, namespace: 'ns1' });
      const late = ids.map((id) => other.subscribe(id));
      await eventually(() => late.every((s) => s.synced), 5000, 'late snapshots');
      for (const [i, s] of late.entries()) assert.deepEqual(plain(s.view()), plain(subs[i].view()), ids[i]);
      other.close();
    });
  }

  test('SSE (fetch transport) replica and resume', async () => {
    const id = 'rg:sse-doc';
    await client.insertAt(id, 0, 'abc');
    const stream = client.events(id, { transport: 'fetch' });
    const sub = stream.subscription;
    await eventually(() => sub.seq === 1, 5000, 'snapshot');
    await client.insertAt(id, 3, 'def');
    await client.deleteAt(id, 0, 2);
    await eventually(() => sub.seq === 3, 5000, 'deltas');
    assert.deepEqual(sub.view(), { value: [...'cdef'], text: 'cdef' });
    stream.close();
  });

  test('ops answer with element ids the replica knows', async () => {
    const id = 'rg:ids';
    const sub = client.subscribe(id);
    const answer = await client.insertAt(id, 0, 'xyz');
    await eventually(() => sub.seq === answer.seq);
    assert.deepEqual(sub.replica.seq.ids(), answer.ids);
    const second = await client.insertAfter(id, answer.ids[0], '-');
    await eventually(() => sub.seq === second.seq);
    assert.equal(sub.view().text, 'x-yz');
    await client.deleteIds(id, [answer.ids[1]]);
    await eventually(() => sub.view().text === 'x-z');
  });
});
