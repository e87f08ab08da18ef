// The WebSocket transport against a real server: acks and errors, reconnect
// with resume (a replay, not a snapshot), ops resent after a restart
// (applied once thanks to op_id), token refresh, a refused token.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SyncdClient, SyncdError, SyncSocket, TokenExpiredError, wsUrl } from '../src/index.js';
import { ADMIN, eventually, fakeToken, serverMissing, startServer } from './helpers.js';

const FAST = { minReconnectMs: 20, maxReconnectMs: 200 };

test('wsUrl puts the token in the query and switches the scheme', () => {
  assert.equal(wsUrl('http://h:1', 'ns', 'a.b'), 'ws://h:1/v1/namespaces/ns/ws?token=a.b');
  assert.equal(wsUrl('https://h', 'ns', 't'), 'wss://h/v1/namespaces/ns/ws?token=t');
});

test('an expired token stops the socket before it connects', async () => {
  let constructed = 0;
  class NoSocket {
    constructor() {
      constructed++;
    }
  }
  const socket = new SyncSocket({
    baseUrl: 'http://127.0.0.1:9',
    namespace: 'ns1',
    token: fakeToken({ namespace: 'ns1', client_id: 1, expires_at: 1, permissions: {} }),
    WebSocket: NoSocket,
  });
  await assert.rejects(socket.connect(), TokenExpiredError);
  assert.equal(socket.state, 'closed');
  assert.equal(constructed, 0);
});

describe('SyncSocket against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let token;
  before(async () => {
    server = await startServer();
    token = await server.token({ clientId: 21 });
  });
  after(() => server?.close());

  const client = (options = {}) =>
    new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: { ...FAST, ...options } });

  test('acks carry the seq (and rga ids); errors reject with the server code', async () => {
    const c = client();
    const ack = await c.send('gc:ack', { op: 'increment', amount: 2 });
    assert.equal(ack.seq, 1);
    const ins = await c.send('rg:ack', { op: 'insert', index: 0, text: 'ab' });
    assert.equal(ins.ids.length, 2);
    // Refused over the socket, with the status the same refusal has over HTTP.
    await assert.rejects(c.send('gc:ack', { op: 'decrement' }), { code: 'invalid_op', status: 400 });
    await assert.rejects(c.send('gc:ack', { op: 'set', type: 'lwwregister', value: 1 }), { code: 'type_mismatch', status: 409 });
    // A repeated op_id is applied once.
    const a = await c.send('gc:once', { op: 'increment', op_id: 'k1' });
    const b = await c.send('gc:once', { op: 'increment', op_id: 'k1' });
    assert.equal(b.seq, a.seq);
    assert.equal(b.duplicate, true);
    assert.equal((await c.read('gc:once')).value, 1);
    // What is not an op is the server's to refuse: a rejected promise, not a throw.
    for (const bad of [null, 'increment', 7, [null]]) {
      await assert.rejects(c.send('gc:ack', bad), (err) => err instanceof SyncdError && err.code !== 'closed', String(bad));
    }
    assert.equal(c.socket.state, 'open');
    c.close();
  });

  test('after a restart: reconnect, replay from since, resend unacked ops once', async () => {
    const watcher = client();
    const writer = client();
    const sub = watcher.subscribe('pn:restart');
    const snapshots = [];
    sub.on('delta', (d) => d.kind === 'snapshot' && snapshots.push(d.seq));
    // The subscription's first snapshot before the first op: the two clients'
    // connections race, and an op applied first makes that snapshot seq 1.
    await eventually(() => snapshots.length === 1);
    await writer.send('pn:restart', { op: 'increment', amount: 10 });
    await eventually(() => sub.value() === 10);
    assert.deepEqual(snapshots, [0]);

    await server.stop();
    await eventually(() => watcher.socket.state === 'connecting', 5000, 'watcher notices');
    // Sent while the server is down: queued, then sent on reconnect.
    const pending = writer.send('pn:restart', { op: 'decrement', amount: 3 });
    assert.equal(writer.socket.pendingOps, 1);
    await server.start();
    const ack = await pending;
    assert.equal(ack.seq, 2);
    await eventually(() => sub.value() === 7, 5000, 'watcher catches up');
    // The watcher resumed with since + epoch: no second snapshot, a replay.
    assert.deepEqual(snapshots, [0]);
    assert.equal(sub.seq, 2);
    watcher.close();
    writer.close();
  });

  test('a token function is asked again when the token runs out', async () => {
    let calls = 0;
    let current = await server.token({ clientId: 22, ttlMs: 1500 });
    const c = new SyncdClient(
      {
        baseUrl: server.url,
        namespace: 'ns1',
        token: async () => {
          calls++;
          return current;
        },
      },
      { socket: FAST },
    );
    await c.send('gc:refresh', { op: 'increment' });
    assert.equal(calls >= 1, true);
    // The app has a fresh token before the old one runs out (as a token
    // function that asks the app's backend would).
    current = await server.token({ clientId: 22, ttlMs: 60_000 });
    await new Promise((r) => setTimeout(r, 1600));
    // The old token expired meanwhile: the server closed the connection (4401,
    // docs/permissions.md#when-access-ends), the socket reconnected with the
    // fresh token, and the op goes through.
    const ack = await c.send('gc:refresh', { op: 'increment' });
    assert.equal(ack.seq, 2);
    assert.ok(calls >= 2);
    c.close();
  });

  test('a subscribe over the rate limit is asked again after retry_after', async () => {
    // A V2 token allowed 3 requests a second: the upgrade and two subscribes.
    const r = await fetch(`${server.url}/v1/namespaces/ns1/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ client_id: 23, rules: { r: [{ p: '*' }], w: [{ p: '*' }], rl: 3 } }),
    });
    assert.equal(r.ok, true, await r.clone().text());
    const limited = (await r.json()).token;
    const c = new SyncdClient({ baseUrl: server.url, token: limited, namespace: 'ns1' }, { socket: FAST });
    const errors = [];
    const subs = ['gc:rl1', 'gc:rl2', 'gc:rl3', 'gc:rl4'].map((id) => {
      const sub = c.subscribe(id);
      sub.on('error', (err) => errors.push(err));
      return sub;
    });
    await eventually(() => subs.every((sub) => sub.synced), 8000, 'every subscription synced');
    assert.equal(errors.length >= 2, true, `refused: ${errors.length}`);
    for (const err of errors) {
      assert.equal(err.code, 'rate_limited');
      assert.equal(err.retryAfter >= 1, true);
    }
    assert.equal(c.socket.state, 'open');
    c.close();
  });

  test('close rejects what is still pending', async () => {
    const c = client();
    const sub = c.subscribe('gc:closing');
    await eventually(() => sub.synced);
    await server.stop();
    await eventually(() => c.socket.state === 'connecting');
    const pending = c.send('gc:closing', { op: 'increment' });
    c.close();
    await assert.rejects(pending, { code: 'closed' });
    await server.start();
  });
});
