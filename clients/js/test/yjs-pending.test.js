// A Yjs document's subscriber, or `?format=crdt` reader, that starts while an
// update waits for its dependency gets it: merged into the state's `update`
// (as Yjs encodes a document for a peer), which Yjs then holds as pending. The
// op delta that later lets it in carries only the dependency.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as Y from 'yjs';
import { SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const ID = 'yd:notes';

const b64 = (bytes) => Buffer.from(bytes).toString('base64');
const bytes = (text) => new Uint8Array(Buffer.from(text, 'base64'));

/** A writer's two updates: "hello", then " world", which waits without the first. */
function dependentUpdates() {
  const writer = new Y.Doc();
  const text = writer.getText('content');
  text.insert(0, 'hello');
  const first = Y.encodeStateAsUpdate(writer);
  const vector = Y.encodeStateVector(writer);
  text.insert(5, ' world');
  return [first, Y.encodeStateAsUpdate(writer, vector)];
}

describe('a Yjs update that waits, to a client that starts meanwhile', { skip }, () => {
  let server;
  let token;

  before(async () => {
    server = await startServer();
    token = await server.token();
  });

  after(async () => {
    await server?.close();
  });

  test('a subscriber and a format=crdt reader end with the whole document', async () => {
    const [first, second] = dependentUpdates();
    const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
    await c.apply(ID, { op: 'update', update: b64(second) });
    const read = await c.read(ID, { format: 'crdt' });
    const reader = new Y.Doc();
    Y.applyUpdate(reader, bytes(read.state.update));

    const subscriber = new Y.Doc();
    const deltas = [];
    c.subscribe(ID, {
      replica: false,
      onDelta: (d) => {
        deltas.push(d);
        Y.applyUpdate(subscriber, bytes(d.kind === 'snapshot' ? d.state.update : d.op.update));
      },
    });
    await eventually(() => deltas.length === 1, 5000, 'snapshot');
    assert.deepEqual([deltas[0].kind, deltas[0].seq], ['snapshot', 1]);
    assert.equal(subscriber.getText('content').toString(), ''); // waits here too

    await c.apply(ID, { op: 'update', update: b64(first) });
    await eventually(() => deltas.length === 2, 5000, 'the dependency');
    assert.deepEqual([deltas[1].kind, deltas[1].seq], ['op', 2]);
    assert.equal(subscriber.getText('content').toString(), 'hello world');
    Y.applyUpdate(reader, bytes(deltas[1].op.update));
    assert.equal(reader.getText('content').toString(), 'hello world');
    c.close();
  });
});
