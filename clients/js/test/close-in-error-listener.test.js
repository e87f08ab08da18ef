// close() called from an `error` listener while a revoked fixed token stops
// the socket or stream: the stop is for the token's reason all the same.
// Subscriptions end with the TokenRevokedError, not a SyncdError `closed`,
// as they do when no listener closes anything (subscription-close.test.js).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EventStream, SyncdClient, TokenRevokedError } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

async function revoke(clientId) {
  const r = await fetch(`${server.url}/v1/namespaces/ns1/revocations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ client_id: clientId }),
  });
  assert.equal(r.status, 200, await r.text());
}

for (const [where, clientId] of [
  ['the socket', 61],
  ['the subscription', 62],
]) {
  test(`SyncSocket: close() in an error listener of ${where} keeps the revoked token's reason`, { skip }, async () => {
    const token = await server.token({ clientId });
    const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: FAST });
    try {
      const sub = c.subscribe(`gc:error-listener-close-${clientId}`);
      const ends = [];
      sub.on('close', (why) => ends.push(why));
      await eventually(() => sub.synced, 5000, 'synced');
      (where === 'the socket' ? c.socket : sub).on('error', () => c.close());
      await revoke(clientId);
      await eventually(() => ends.length > 0, 5000, 'the subscription ended');
      assert.equal(c.socket.state, 'closed');
      assert.ok(ends[0] instanceof TokenRevokedError, String(ends[0]));
      assert.throws(
        () => c.socket.subscribe('gc:error-listener-close-again'),
        (err) => err.code === 'closed' && err.cause instanceof TokenRevokedError,
      );
    } finally {
      c.close();
    }
  });
}

test('EventStream: close() in an error listener keeps the revoked token reason', { skip }, async () => {
  const token = await server.token({ clientId: 63 });
  const stream = new EventStream({ baseUrl: server.url, token, namespace: 'ns1' }, 'gc:error-listener-close-sse', FAST);
  try {
    const ends = [];
    stream.subscription.on('close', (why) => ends.push(why));
    await eventually(() => stream.subscription.synced, 5000, 'synced');
    stream.on('error', () => stream.close());
    await revoke(63);
    await eventually(() => ends.length > 0, 5000, 'the subscription ended');
    assert.equal(stream.state, 'closed');
    assert.ok(ends[0] instanceof TokenRevokedError, String(ends[0]));
  } finally {
    stream.close();
  }
});
