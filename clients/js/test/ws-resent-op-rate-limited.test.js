// An op still pending when the connection dropped is sent again once the
// socket reopens; when the token's rate limit refuses that resend (the
// reconnect spends the limit on its upgrade and subscribes first), it stays
// pending and goes again after retry_after: its promise answers the op, not
// the reconnect's own burst (an op applied before the drop would otherwise
// be reported refused).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const LIMIT = 5;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_RATE_LIMIT: String(LIMIT) });
  token = await server.token({ clientId: 72 });
});
after(() => server?.close());

test('an op resent after a reconnect and refused rate_limited is sent again', { skip }, async () => {
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1' },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  const subs = Array.from({ length: LIMIT }, (_, i) => c.subscribe(`gc:rl-op-${i}`));
  await eventually(() => subs.every((s) => s.synced), 8000, 'subscribed');
  await server.stop();
  await eventually(() => c.socket.state === 'connecting', 5000, 'disconnected');
  const sent = c.send('gc:rl-op', { op: 'increment', amount: 3 });
  await new Promise((r) => setTimeout(r, 1100));
  await server.start();
  const ack = await sent;
  assert.equal(typeof ack.seq, 'number');
  const r = await fetch(`${server.url}/v1/namespaces/ns1/crdts/gc:rl-op`, { headers: { authorization: `Bearer ${ADMIN}` } });
  assert.equal((await r.json()).value, 3);
  c.close();
});
