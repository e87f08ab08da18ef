// close() is for good: the timers a socket starts to send again later (an op
// resent as the socket reopened and refused rate_limited, a presence announce
// refused the same way) are cleared with it, not left to fire after the close
// (keeping a Node process alive until they do). After close() no connection
// is made and nothing is sent. A real server whose token rate limit a
// reconnect exceeds (as in ws-resent-op-rate-limited.test.js), and a
// WebSocket that counts what it does.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, ops } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
const LIMIT = 2;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_RATE_LIMIT: String(LIMIT) });
  token = await server.token({ clientId: 73 });
});
after(() => server?.close());

/** A WebSocket that counts the connections made and the frames sent. */
function countingWebSocket() {
  const counts = { opened: 0, sent: 0 };
  class Counting extends globalThis.WebSocket {
    constructor(...args) {
      super(...args);
      counts.opened++;
    }
    send(data) {
      counts.sent++;
      super.send(data);
    }
  }
  return { counts, Counting };
}

test('close() clears the rate-limited resend timers: nothing fires or connects after it', { skip }, async () => {
  const timers = trackClientTimers();
  const { counts, Counting } = countingWebSocket();
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1', WebSocket: Counting },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  try {
    const errors = [];
    c.socket.on('error', (err) => errors.push(err.code));
    // The upgrade and this update fill the window of LIMIT (2).
    await c.send('pr:close-rl', ops.updatePresence({ name: 'ann' }, { ttlMs: 60_000 }));

    await server.stop();
    await eventually(() => c.socket.state === 'connecting', 5000, 'disconnected');
    // As the socket reopens: the upgrade and the first op fill the window,
    // the second op and the presence announce are refused.
    const sent = [c.send('gc:close-rl-op', { op: 'increment' }), c.send('gc:close-rl-op', { op: 'increment' })];
    for (const p of sent) p.catch(() => {});
    await server.start();
    // The op resent and the presence announced as the socket reopened are both refused.
    await eventually(
      () => errors.includes('rate_limited') && timers.pending().some((t) => t.via.includes('SyncSocket._resendLater')),
      8000,
      'both resends refused and waiting',
    );
    const resends = timers.pending().filter((t) => t.via.some((name) => /_resendLater|_announce/.test(name)));
    const longest = Math.max(...resends.map((t) => t.delay));

    c.close();
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left after close()');
    await sent[0];
    await assert.rejects(sent[1], (err) => err.code === 'closed');
    const atClose = { ...counts };
    await new Promise((r) => setTimeout(r, longest + 300));
    assert.deepEqual(counts, atClose, 'no connection made and no frame sent after close()');
  } finally {
    c.close();
    timers.restore();
  }
});
