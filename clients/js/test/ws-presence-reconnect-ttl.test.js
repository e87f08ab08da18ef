// A presence entry announced again after a reconnect keeps the TTL the app
// gave it: the socket sends what is left of it, so reconnects do not keep an
// entry the app stopped renewing alive past its time.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, ops } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  token = await server.token({ clientId: 31 });
});
after(() => server?.close());

test('a presence entry announced after a reconnect still ends at its first TTL', { skip }, async () => {
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1' },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  const ttlMs = 2000;
  const t0 = Date.now();
  await c.send('pr:ttl', ops.updatePresence({ name: 'ann' }, { ttlMs }));
  await server.restart();
  await eventually(() => c.socket.state === 'open' && c.socket.pendingOps === 0, 5000, 'announced again');
  const history = await c.history('pr:ttl');
  const [announce] = history.ops;
  assert.equal(announce.op.op, 'update', 'the entry was announced again');
  // The entry ends when the app's TTL runs out (the announce may round it up
  // to the server's minimum TTL, 1 s), not a whole TTL after the reconnect.
  assert.ok(
    announce.op.expires_at <= Math.max(t0 + ttlMs + 50, announce.op.stamp + 1000),
    `expires ${announce.op.expires_at - t0} ms after the first update, its TTL was ${ttlMs}`,
  );
  // Past its end: the app's TTL, or the server's minimum from the announce
  // when a slow restart left less than that (same machine, same clock).
  const end = Math.max(t0 + ttlMs, announce.op.expires_at);
  await new Promise((r) => setTimeout(r, Math.max(0, end + 300 - Date.now())));
  const { value } = await c.read('pr:ttl');
  assert.equal('31' in value, false, 'gone once its TTL ran out');
  c.close();
});
