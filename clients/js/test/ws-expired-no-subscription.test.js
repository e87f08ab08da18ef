// A fixed token the server calls expired on a socket with no subscription
// (ops only): the server sends no `error` then, only the close 4401 `token
// expired`. The socket stops with the server's `token_expired` (status 401),
// as when subscriptions hear it first (ending.test.js), instead of
// reconnecting: with this machine's clock behind the server's, the token
// looks valid here, and every upgrade was refused, at every backoff, until
// this clock caught up.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncSocket } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

test('an expired fixed token closing a socket without subscriptions stops it', { skip }, async () => {
  const token = await server.token({ clientId: 35, ttlMs: 1500 });
  const realNow = Date.now;
  Date.now = () => realNow() - 60_000;
  const socket = new SyncSocket({ baseUrl: server.url, namespace: 'ns1', token }, FAST);
  try {
    const errors = [];
    const disconnects = [];
    socket.on('error', (err) => errors.push(err));
    socket.on('disconnect', (err) => disconnects.push(err));
    await socket.op('gc:ws-exp-ops', { op: 'increment' });
    await eventually(() => socket.state === 'closed' || disconnects.length > 0, 5000, 'the server closed');
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(
      disconnects.map((e) => e.message),
      [],
      'no reconnect with a token the server refuses',
    );
    assert.equal(socket.state, 'closed');
    assert.equal(errors[0]?.code, 'token_expired');
    assert.equal(errors[0]?.status, 401);
    await assert.rejects(socket.op('gc:ws-exp-ops', { op: 'increment' }), (err) => err.code === 'token_expired' || err.code === 'closed');
  } finally {
    socket.close();
    Date.now = realNow;
  }
});
