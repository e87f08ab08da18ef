// An op over the server's SERVICE_MAX_BODY_BYTES closes the connection with
// 1009 (docs/protocol.md#the-websocket). It stayed pending, so every
// reconnect sent it again and was closed again: a reconnect storm for ever,
// the op's promise never settled and every subscription kept dropping. The
// socket now rejects it with SyncdError `payload_too_large` (413, as HTTP
// answers it) and reconnects once, without it.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, SyncdError } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_MAX_BODY_BYTES: '4096' });
  token = await server.token({ clientId: 75 });
});
after(() => server?.close());

const within = (promise, ms, what) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms))]);

test('an op over the body limit is rejected payload_too_large, and the socket settles', { skip }, async () => {
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1' },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  const sub = c.subscribe('gc:big-watch');
  await eventually(() => sub.synced, 5000, 'subscribed');
  let disconnects = 0;
  c.socket.on('disconnect', () => disconnects++);
  const small = c.send('lw:big', { op: 'set', value: 'small' });
  const big = c.send('lw:big', { op: 'set', value: 'x'.repeat(10_000) });
  const after = c.send('lw:big', { op: 'set', value: 'after' });
  await within(
    assert.rejects(big, (err) => err instanceof SyncdError && err.code === 'payload_too_large' && err.status === 413),
    3000,
    'the big op',
  );
  await within(small, 3000, 'the op before');
  await within(after, 3000, 'the op after');
  await eventually(() => sub.synced && c.socket.pendingOps === 0, 5000, 'settled');
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(disconnects <= 1, `${disconnects} disconnects`);
  assert.equal((await c.read('lw:big')).value, 'after');
  c.close();
});
