// The presence a socket announces again after a reconnect is sent again when
// the token's rate limit refused it: a reconnect spends the limit on its
// upgrade and its subscribes (each counts), and the announce comes last.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, ops } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const LIMIT = 5;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_RATE_LIMIT: String(LIMIT) });
  token = await server.token({ clientId: 71 });
});
after(() => server?.close());

test('a presence announce refused rate_limited is sent again after retry_after', { skip }, async () => {
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1' },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  const errors = [];
  c.socket.on('error', (err) => errors.push(err.code));
  // As many subscriptions as the limit: with the upgrade, a reconnect is over it.
  const subs = Array.from({ length: LIMIT }, (_, i) => c.subscribe(`gc:rl-${i}`));
  await eventually(() => subs.every((s) => s.synced), 8000, 'subscribed');
  await new Promise((r) => setTimeout(r, 1100));
  await c.send('pr:rl', ops.updatePresence({ name: 'ann' }, { ttlMs: 60_000 }));
  await new Promise((r) => setTimeout(r, 1100));

  await server.restart();
  await eventually(() => subs.every((s) => s.synced), 8000, 'resubscribed');
  // Read with the admin secret, which the rate limit leaves out.
  const entries = async () => {
    const r = await fetch(`${server.url}/v1/namespaces/ns1/crdts/pr:rl`, { headers: { authorization: `Bearer ${ADMIN}` } });
    assert.equal(r.status, 200);
    return (await r.json()).value;
  };
  await eventually(async () => '71' in (await entries()), 5000, 'the entry back');
  assert.ok(errors.includes('rate_limited'), `the announce was refused at first (errors: ${errors})`);
  c.close();
});
