// A Yjs document (ydoc) has no replica in this client (Yjs itself is its
// replica, and not a dependency of the client): a subscription to one keeps
// none and passes its deltas on, to be applied to a Y.Doc. Asking for a
// replica of a `yd:` id explicitly is refused when subscribing, with a
// message that says what to do; of an id that turns out a ydoc, an error
// says so once, and the deltas still come.
//
// The subscription used to build a replica of every snapshot's type: for
// `ydoc` that threw inside the delta handler, and the socket resynced, got
// the snapshot again and threw again, for ever, with no delta passed on.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as Y from 'yjs';
import { SyncdError, Subscription, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;

const b64 = (bytes) => Buffer.from(bytes).toString('base64');
const bytes = (text) => new Uint8Array(Buffer.from(text, 'base64'));

/** A Y.Doc fed the Yjs update of each delta: a snapshot's state, an op's. */
function follower() {
  const doc = new Y.Doc();
  const deltas = [];
  const errors = [];
  return {
    doc,
    deltas,
    errors,
    text: () => doc.getText('content').toString(),
    onDelta: (d) => {
      deltas.push(d);
      if (d.kind === 'snapshot' && d.state) Y.applyUpdate(doc, bytes(d.state.update));
      if (d.kind === 'op') Y.applyUpdate(doc, bytes(d.op.update));
    },
    onError: (e) => errors.push(e),
  };
}

/** An update that inserts `text` at the end of `doc`'s content. */
function edit(doc, text) {
  const vector = Y.encodeStateVector(doc);
  doc.getText('content').insert(doc.getText('content').length, text);
  return b64(Y.encodeStateAsUpdate(doc, vector));
}

describe('a ydoc subscription, without a server', () => {
  test('replica: true for a yd: id is refused, saying what to do', () => {
    assert.throws(
      () => new Subscription('yd:notes', { replica: true, resync: () => {} }),
      (err) =>
        err instanceof SyncdError &&
        err.code === 'no_replica' &&
        /yd:notes/.test(err.message) &&
        /Y\.Doc/.test(err.message) &&
        /replica: false/.test(err.message),
    );
  });

  test('by default it keeps no replica and passes every delta on', () => {
    let resyncs = 0;
    const sub = new Subscription('yd:notes', { resync: () => resyncs++ });
    const seen = [];
    sub.on('delta', (d, verdict) => seen.push(verdict));
    const writer = new Y.Doc();
    const update = edit(writer, 'hi');
    sub.handleDelta({ kind: 'snapshot', id: 'yd:notes', type: 'ydoc', seq: 1, epoch: 'e', state: { update } });
    sub.handleDelta({ kind: 'op', id: 'yd:notes', type: 'ydoc', seq: 2, epoch: 'e', op: { op: 'update', update } });
    assert.deepEqual(seen, ['snapshot', 'apply']);
    assert.equal(resyncs, 0);
    assert.equal(sub.replica, null);
    assert.equal(sub.view(), null);
    assert.equal(sub.seq, 2);
  });
});

describe('a ydoc subscription against syncd', { skip }, () => {
  let server;
  let token;

  before(async () => {
    server = await startServer();
    token = await server.token();
  });

  after(async () => {
    await server?.close();
  });

  for (const via of ['ws', 'sse']) {
    test(`over ${via}, with the default options, a Y.Doc follows the document`, async () => {
      const id = `yd:follow-${via}`;
      const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
      const writer = new Y.Doc();
      await c.apply(id, { op: 'update', update: edit(writer, 'hello') });
      const f = follower();
      const options = { onDelta: f.onDelta, onError: f.onError };
      let sub;
      let stream;
      if (via === 'ws') {
        sub = c.subscribe(id, options);
      } else {
        stream = c.events(id);
        sub = stream.subscription;
        sub.on('delta', f.onDelta);
        stream.on('error', f.onError);
      }
      await eventually(() => f.deltas.length === 1, 5000, 'the snapshot');
      await c.apply(id, { op: 'update', update: edit(writer, ' world') });
      await eventually(() => f.text() === 'hello world', 5000, 'the op');
      assert.deepEqual(
        f.deltas.map((d) => [d.kind, d.seq]),
        [
          ['snapshot', 1],
          ['op', 2],
        ],
      );
      assert.deepEqual(f.errors, []);
      assert.equal(sub.replica, null);
      stream?.close();
      c.close();
    });
  }

  test('replica: true for an id without a prefix that is a ydoc: one clear error, and the deltas', async () => {
    const id = 'notes-unprefixed';
    const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
    const writer = new Y.Doc();
    await c.apply(id, { op: 'update', type: 'ydoc', update: edit(writer, 'hello') });
    const f = follower();
    const sub = c.subscribe(id, { replica: true, onDelta: f.onDelta, onError: f.onError });
    await eventually(() => f.deltas.length === 1, 5000, 'the snapshot');
    await c.apply(id, { op: 'update', update: edit(writer, '!') });
    await eventually(() => f.text() === 'hello!', 5000, 'the op');
    assert.equal(f.errors.length, 1);
    assert.ok(f.errors[0] instanceof SyncdError && f.errors[0].code === 'no_replica', String(f.errors[0]));
    assert.equal(f.deltas.length, 2);
    assert.equal(sub.replica, null);
    c.close();
  });
});
