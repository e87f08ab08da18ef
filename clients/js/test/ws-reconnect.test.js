// What a reconnect restores, against a real server: the presence this client
// set over the socket (the server wrote its leave when the connection closed),
// `synced` (and its event) when the server has nothing to replay (its `synced`
// message ends every start; the resume asks from the exact position), and
// subscribe() while reconnecting (queued) or after close() (an error).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { decode } from '@msgpack/msgpack';
import { SyncdClient, SyncdError, ops } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const FAST = { minReconnectMs: 20, maxReconnectMs: 200 };

describe('reconnect against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let tokens;
  before(async () => {
    server = await startServer();
    tokens = { 31: await server.token({ clientId: 31 }), 32: await server.token({ clientId: 32 }) };
  });
  after(() => server?.close());

  const client = (clientId = 31) =>
    new SyncdClient({ baseUrl: server.url, token: tokens[clientId], namespace: 'ns1' }, { socket: FAST });

  const restart = async (...clients) => {
    await server.stop();
    await eventually(() => clients.every((c) => c.socket.state === 'connecting'), 5000, 'clients notice');
    await server.start();
    await eventually(() => clients.every((c) => c.socket.state === 'open'), 5000, 'clients reconnect');
  };

  test('presence set over the socket comes back after a reconnect; presence left does not', async () => {
    const me = client(31);
    const other = client(32);
    const watch = other.subscribe('pr:room');
    await me.send('pr:room', ops.updatePresence({ name: 'ann' }, { ttlMs: 60_000 }));
    await me.send('pr:room', ops.updatePresence({ name: 'ann', cursor: 3 }, { ttlMs: 60_000 }));
    await me.send('pr:left', ops.updatePresence({ name: 'ann' }, { ttlMs: 60_000 }));
    await me.send('pr:left', ops.leavePresence());
    // Let run out (not renewed): not announced again either.
    await me.send('pr:expired', ops.updatePresence({ name: 'ann' }, { ttlMs: 1000 }));
    const expiredAt = Date.now() + 1000;
    await eventually(() => watch.value()?.['31']?.cursor === 3, 5000, 'other sees the entry');

    await new Promise((r) => setTimeout(r, Math.max(0, expiredAt - Date.now())));
    const seen = [];
    watch.on('change', () => seen.push(structuredClone(watch.value())));
    await restart(me, other);
    // The server wrote a leave for the closed connection; the client then
    // announced its latest presence again, with no help from the app.
    const left = (v) => !('31' in v);
    await eventually(
      () => seen.findIndex(left) >= 0 && seen.slice(seen.findIndex(left)).some((v) => v['31']?.cursor === 3),
      5000,
      'the other subscriber sees the leave, then the entry back',
    );
    assert.deepEqual(watch.value()['31'], { name: 'ann', cursor: 3 });
    await eventually(() => me.socket.pendingOps === 0, 5000, 'announces acked');
    const gone = await me.read('pr:left');
    assert.equal('31' in gone.value, false, 'a left presence is not announced again');
    const history = await me.history('pr:expired');
    assert.deepEqual(
      history.ops.map((o) => o.op.op),
      ['leave', 'update'],
      'an expired presence is not announced again',
    );
    assert.deepEqual((await me.read('pr:room')).value['31'], { name: 'ann', cursor: 3 });
    me.close();
    other.close();
  });

  test('synced comes back (with its event) when the server has nothing to replay', async () => {
    const writer = client(31);
    // A token function the test holds back: the reconnect waits for it.
    let gate = null;
    const c = new SyncdClient(
      {
        baseUrl: server.url,
        namespace: 'ns1',
        token: async () => {
          await gate;
          return tokens[32];
        },
      },
      { socket: FAST },
    );
    await writer.send('gc:synced', { op: 'increment' });
    const sub = c.subscribe('gc:synced');
    const events = [];
    const kinds = [];
    sub.on('synced', () => events.push(sub.seq));
    sub.on('delta', (d) => kinds.push(d.kind));
    await eventually(() => sub.synced && sub.seq === 1, 5000, 'first sync');
    assert.deepEqual(events, [1]);

    // Nothing written meanwhile: the server has nothing to replay.
    await restart(c);
    await eventually(() => sub.synced, 5000, 'synced after an up-to-date resume');
    assert.deepEqual(events, [1, 1]);
    assert.equal(sub.value(), 1);
    assert.deepEqual(kinds, ['snapshot'], 'resumed, not started over');

    // Written while this client was away: a replay, then synced, once.
    let open;
    gate = new Promise((r) => (open = r));
    await server.stop();
    await eventually(() => c.socket.state === 'connecting' && !sub.synced);
    await server.start();
    await writer.send('gc:synced', { op: 'increment', amount: 4 });
    await writer.send('gc:synced', { op: 'increment', amount: 5 });
    open();
    await eventually(() => sub.synced, 5000, 'synced after a replay');
    // Synced once the whole replay was in, not at its first delta.
    assert.deepEqual(events, [1, 1, 3]);
    assert.equal(sub.value(), 10);
    assert.deepEqual(kinds, ['snapshot', 'op', 'op']);
    writer.close();
    c.close();
  });

  test('an up-to-date resume asks from the exact position: no snapshot, no probe, synced again', async () => {
    const writer = client(31);
    for (let i = 0; i < 3; i++) await writer.send('gc:exact', { op: 'increment' });
    const sent = [];
    class Recording extends globalThis.WebSocket {
      send(data) {
        sent.push(typeof data === 'string' ? JSON.parse(data) : decode(data));
        super.send(data);
      }
    }
    const c = new SyncdClient(
      { baseUrl: server.url, token: tokens[32], namespace: 'ns1', WebSocket: Recording },
      { socket: FAST },
    );
    const sub = c.subscribe('gc:exact');
    const events = [];
    const kinds = [];
    sub.on('synced', () => events.push(sub.seq));
    sub.on('delta', (d) => kinds.push(d.kind));
    await eventually(() => sub.synced && sub.seq === 3, 5000, 'first sync');
    await restart(c);
    await eventually(() => sub.synced, 5000, 'synced after an up-to-date resume');
    assert.deepEqual(events, [3, 3]);
    assert.deepEqual(kinds, ['snapshot'], 'the resume got no snapshot (nor anything else)');
    assert.equal(sub.value(), 3);
    // From the exact (epoch, seq): not one op back, and no ping to confirm it.
    const subscribes = sent.filter((m) => m.kind === 'subscribe');
    assert.deepEqual(subscribes, [
      { kind: 'subscribe', id: 'gc:exact' },
      { kind: 'subscribe', id: 'gc:exact', since: 3, epoch: sub.epoch },
    ]);
    assert.equal(sent.filter((m) => m.kind === 'ping' && m.ref !== undefined).length, 0);
    // Still live after it.
    await writer.send('gc:exact', { op: 'increment', amount: 2 });
    await eventually(() => sub.value() === 5, 5000, 'live after the resume');
    assert.deepEqual(events, [3, 3], 'synced fires once per (re)connect');
    writer.close();
    c.close();
  });

  test('an SSE stream is synced again after an up-to-date resume', async () => {
    const writer = client(31);
    await writer.send('gc:sse-synced', { op: 'increment', amount: 3 });
    const urls = [];
    const recordingFetch = (url, init) => {
      urls.push(new URL(url));
      return fetch(url, init);
    };
    const reader = new SyncdClient({ baseUrl: server.url, token: tokens[32], namespace: 'ns1', fetch: recordingFetch });
    const stream = reader.events('gc:sse-synced', { transport: 'fetch', minReconnectMs: 20, maxReconnectMs: 200 });
    const sub = stream.subscription;
    const events = [];
    const kinds = [];
    sub.on('synced', () => events.push(sub.seq));
    sub.on('delta', (d) => kinds.push(d.kind));
    await eventually(() => sub.synced && sub.value() === 3, 5000, 'first sync');
    await server.restart();
    await eventually(() => events.length === 2, 8000, 'synced again');
    assert.equal(sub.synced, true);
    assert.deepEqual(events, [1, 1]);
    assert.deepEqual(kinds, ['snapshot'], 'resumed, not started over');
    // Resumed from the exact position, not one op back.
    const resumed = urls.filter((u) => u.pathname.endsWith('/events') && u.searchParams.has('since'));
    assert.ok(resumed.length >= 1);
    assert.ok(resumed.every((u) => u.searchParams.get('since') === '1' && u.searchParams.get('epoch') === sub.epoch));
    stream.close();
    writer.close();
  });

  test('subscribe while reconnecting is sent once the socket is open again', async () => {
    const c = client(31);
    const first = c.subscribe('gc:queued-a');
    await eventually(() => first.synced);
    await server.stop();
    await eventually(() => c.socket.state === 'connecting');
    const queued = c.subscribe('gc:queued-b');
    assert.equal(queued.synced, false);
    await server.start();
    await eventually(() => queued.synced, 5000, 'queued subscription synced');
    await c.send('gc:queued-b', { op: 'increment', amount: 2 });
    await eventually(() => queued.value() === 2, 5000, 'queued subscription follows');
    c.close();
  });

  test('subscribe after close() throws a SyncdError closed', async () => {
    const c = client(31);
    const sub = c.subscribe('gc:after-close');
    await eventually(() => sub.synced);
    c.close();
    assert.throws(
      () => c.subscribe('gc:after-close-2'),
      (err) => err instanceof SyncdError && err.code === 'closed' && /closed/.test(err.message),
    );
    assert.throws(() => c.socket.subscribe('gc:after-close-3'), { code: 'closed' });
    // Closed before it was ever opened: the same.
    const never = client(31);
    never.socket.close();
    assert.throws(() => never.subscribe('gc:never'), { code: 'closed' });
  });
});
