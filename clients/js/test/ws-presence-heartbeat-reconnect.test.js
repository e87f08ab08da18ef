// A presence heartbeat (an update without data: it keeps the entry's data,
// docs/data-model.md#presence) is the last update a socket acked for an id;
// after a reconnect the server has written the old connection's leave, so
// announcing the heartbeat as it was brought the entry back with no data.
// The announce carries the data the entry had.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, ops } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  token = await server.token({ clientId: 73 });
});
after(() => server?.close());

const entries = async (id) => {
  const r = await fetch(`${server.url}/v1/namespaces/ns1/crdts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return (await r.json()).value;
};

test('a presence set with data, then renewed by heartbeats, comes back with its data', { skip }, async () => {
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1' },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  await c.send('pr:hb', ops.updatePresence({ name: 'ann', cursor: 4 }, { ttlMs: 60_000 }));
  await c.send('pr:hb', ops.updatePresence(undefined, { ttlMs: 60_000 }));
  await c.send('pr:hb', ops.updatePresence(undefined, { ttlMs: 60_000 }));
  assert.deepEqual((await entries('pr:hb'))['73'], { name: 'ann', cursor: 4 });
  await server.restart();
  await eventually(() => c.socket.state === 'open' && c.socket.pendingOps === 0, 5000, 'announced again');
  await eventually(async () => '73' in (await entries('pr:hb')), 5000, 'the entry back');
  assert.deepEqual((await entries('pr:hb'))['73'], { name: 'ann', cursor: 4 });
  // A data update after the heartbeats is what comes back after the next reconnect.
  await c.send('pr:hb', ops.updatePresence({ name: 'ann', cursor: 9 }, { ttlMs: 60_000 }));
  await c.send('pr:hb', ops.updatePresence(undefined, { ttlMs: 60_000 }));
  await server.restart();
  await eventually(() => c.socket.state === 'open' && c.socket.pendingOps === 0, 5000, 'announced again');
  await eventually(async () => '73' in (await entries('pr:hb')), 5000, 'the entry back');
  assert.deepEqual((await entries('pr:hb'))['73'], { name: 'ann', cursor: 9 });
  c.close();
});
