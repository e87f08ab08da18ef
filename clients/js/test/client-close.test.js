// SyncdClient.close() is for good even when the client had not opened its
// socket yet: subscribe() then throws and send() rejects with SyncdError
// `closed` (README), instead of opening a socket of a closed client.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, SyncdError, ops } from '../src/index.js';
import { serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  token = await server.token({ clientId: 51 });
});
after(() => server?.close());

const isClosed = (err) => err instanceof SyncdError && err.code === 'closed';

test('a client closed before it used its socket does not open one', { skip }, async () => {
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  c.close();
  assert.throws(() => c.subscribe('gc:closed'), isClosed);
  await assert.rejects(c.send('gc:closed', { op: 'increment' }), isClosed);
  await assert.rejects(c.send('pr:closed', ops.updatePresence({ name: 'ann' })), isClosed);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(c.socket.state, 'closed');
  assert.equal(await c.read('gc:closed'), null, 'nothing was written');
  c.close();
});

test('a client closed after it used its socket: the same', { skip }, async () => {
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  await c.send('gc:used', { op: 'increment' });
  c.close();
  assert.throws(() => c.subscribe('gc:used'), isClosed);
  await assert.rejects(c.send('gc:used', { op: 'increment' }), isClosed);
  assert.equal((await c.read('gc:used')).value, 1);
});
