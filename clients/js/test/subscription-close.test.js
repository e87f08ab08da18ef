// A subscription ends with its transport: once the socket (or the SSE stream)
// is closed, by close() or for good by the server (a revoked fixed token), each
// subscription is `closed`, no longer `synced`, and emits `close` once with
// why (a SyncdError `closed`, or the error that stopped the transport), so
// code waiting on it does not wait for ever; its apply() rejects with the
// SyncdError `closed` the socket gives. unsubscribe() ends it the same way.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, SyncdError, TokenRevokedError } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

const isClosed = (err) => err instanceof SyncdError && err.code === 'closed';

/** The `close` events of `sub`, as they come. */
function closes(sub) {
  const seen = [];
  sub.on('close', (why) => seen.push(why));
  return seen;
}

test('closing the socket ends its subscriptions', { skip }, async () => {
  const token = await server.token({ clientId: 81 });
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: FAST });
  const subs = [c.subscribe('gc:sub-close-a'), c.subscribe('gc:sub-close-b')];
  const seen = subs.map(closes);
  await eventually(() => subs.every((s) => s.synced), 5000, 'synced');
  c.close();
  for (const [i, sub] of subs.entries()) {
    assert.equal(sub.closed, true);
    assert.equal(sub.synced, false);
    assert.equal(seen[i].length, 1, 'close emitted once');
    assert.ok(isClosed(seen[i][0]), String(seen[i][0]));
    await assert.rejects(sub.apply({ op: 'increment' }), isClosed);
  }
  c.close();
  assert.deepEqual(
    seen.map((s) => s.length),
    [1, 1],
    'not again',
  );
});

test('a socket the server stops (a revoked fixed token) ends its subscriptions with the error', { skip }, async () => {
  const token = await server.token({ clientId: 82 });
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: FAST });
  const sub = c.subscribe('gc:sub-close-revoked');
  const seen = closes(sub);
  await eventually(() => sub.synced, 5000, 'synced');
  const r = await fetch(`${server.url}/v1/namespaces/ns1/revocations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ client_id: 82 }),
  });
  assert.equal(r.status, 200, await r.text());
  await eventually(() => seen.length > 0, 5000, 'the subscription ended');
  assert.equal(sub.closed, true);
  assert.ok(seen[0] instanceof TokenRevokedError, String(seen[0]));
  await assert.rejects(sub.apply({ op: 'increment' }), isClosed);
});

test('unsubscribe() ends the subscription', { skip }, async () => {
  const token = await server.token({ clientId: 83 });
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }, { socket: FAST });
  const sub = c.subscribe('gc:sub-close-unsub');
  const seen = closes(sub);
  await eventually(() => sub.synced, 5000, 'synced');
  sub.unsubscribe();
  assert.equal(sub.closed, true);
  assert.equal(sub.synced, false);
  assert.equal(seen.length, 1);
  assert.ok(isClosed(seen[0]), String(seen[0]));
  c.close();
  assert.equal(seen.length, 1, 'closing the socket later does not end it again');
});

test('closing an SSE stream ends its subscription', { skip }, async () => {
  const token = await server.token({ clientId: 84 });
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  const stream = c.events('gc:sub-close-sse', { transport: 'fetch', ...FAST });
  const sub = stream.subscription;
  const seen = closes(sub);
  await eventually(() => sub.synced, 5000, 'synced');
  stream.close();
  assert.equal(sub.closed, true);
  assert.equal(sub.synced, false);
  assert.equal(seen.length, 1);
  assert.ok(isClosed(seen[0]), String(seen[0]));
  c.close();
});
