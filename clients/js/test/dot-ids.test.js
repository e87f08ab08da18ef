// The CRDT ids "." and ".." are valid (docs/data-model.md#identifiers) but cannot
// be a path segment of a URL that fetch or EventSource takes: the WHATWG URL
// parser drops them as dot segments, "%2E" spellings included, so
// `history('.')` asked for /crdts/history, the read of the CRDT named
// "history", and answered with that one. The HTTP calls and the SSE stream
// refuse them (a TypeError, thrown or rejected as for any invalid id,
// nothing sent); the WebSocket carries ids in its
// messages and takes them.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let client;
before(async () => {
  if (skip) return;
  server = await startServer();
  client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 41 }), namespace: 'ns1' });
});
after(async () => {
  client?.close();
  await server?.close();
});

test('HTTP calls refuse "." and "..", never reaching another CRDT', { skip }, async () => {
  // A CRDT whose name is what "/crdts/./history" becomes.
  await client.apply('history', { type: 'gcounter', op: 'increment' });
  for (const id of ['.', '..']) {
    await assert.rejects(async () => client.history(id), TypeError, id);
    await assert.rejects(async () => client.read(id), TypeError, id);
    await assert.rejects(async () => client.apply(id, { type: 'gcounter', op: 'increment' }), TypeError, id);
    await assert.rejects(async () => client.at(id, 1), TypeError, id);
    await assert.rejects(async () => client.deleteCrdt(id), TypeError, id);
    assert.throws(() => client.events(id), TypeError, id);
  }
  assert.equal((await client.read('history')).value, 1);
});

test('the WebSocket takes them', { skip }, async () => {
  const ack = await client.send('.', { type: 'gcounter', op: 'increment' });
  assert.equal(ack.seq, 1);
});
