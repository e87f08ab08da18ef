// A connection attempt's timeout (connectTimeoutMs) was cleared only when a
// connection opened or close() was called: an attempt lost before it opened
// (the server down, the upgrade refused) left its timer pending for the whole
// timeout, 10 s by default, keeping a Node process alive and the lost
// WebSocket with it. It is cleared when the connection is lost: from then on
// only the reconnect's own wait is pending. A real server, stopped under a
// subscribed socket so that its reconnects fail.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  token = await server.token({ clientId: 93 });
});
after(() => server?.close());

test('a lost connection leaves no connect timer pending', { skip }, async () => {
  const timers = trackClientTimers();
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1' },
    // A long connect timeout: one left pending outlives the test by far.
    { socket: { minReconnectMs: 20, maxReconnectMs: 100, connectTimeoutMs: 60_000 } },
  );
  try {
    const sub = c.subscribe('gc:connect-timer-loss');
    await eventually(() => sub.synced, 5000, 'synced');
    // Each loss, as it is reported: the timers of the client then pending.
    const atLoss = [];
    c.socket.on('disconnect', () => atLoss.push(timers.pending().map((t) => t.name)));
    await server.stop();
    // The first loss (an open connection) and two failed attempts after it.
    await eventually(() => atLoss.length >= 3, 8000, 'three losses');
    const left = timers.pending().filter((t) => t.delay === 60_000);
    assert.deepEqual(atLoss.slice(0, 3), [[], [], []], 'no client timer pending as a loss is reported');
    assert.ok(left.length <= 1, `at most the attempt under way has one: ${JSON.stringify(left)}`);

    await server.start();
    await eventually(() => sub.synced, 8000, 'synced again');
    assert.deepEqual(
      timers.pending().filter((t) => t.delay === 60_000),
      [],
      'none once open',
    );
  } finally {
    c.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'none after close()');
});
