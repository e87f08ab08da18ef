// close() called from a listener of the socket or stream, while it is in the
// middle of something (reporting a disconnect before it schedules the
// reconnect, reporting `open` before it starts its ping), is for good like
// any other: no reconnect follows, no timer is left. (The socket closed in a
// disconnect listener used to reconnect and be open again.) A real server
// closes the connection (an op over its SERVICE_MAX_BODY_BYTES: 1009).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EventStream, SyncdClient, SyncSocket } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_MAX_BODY_BYTES: '4096' });
  token = await server.token({ clientId: 97 });
});
after(() => server?.close());

/** A WebSocket that counts the connections made. */
function countingWebSocket() {
  const counts = { opened: 0 };
  class Counting extends globalThis.WebSocket {
    constructor(...args) {
      super(...args);
      counts.opened++;
    }
  }
  return { counts, Counting };
}

const settle = () => new Promise((r) => setTimeout(r, 300));

test('close() in a disconnect listener: no reconnect, no timer', { skip }, async () => {
  const timers = trackClientTimers();
  const { counts, Counting } = countingWebSocket();
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1', WebSocket: Counting }, { socket: FAST });
  try {
    await c.send('gc:listener-close', { op: 'increment' });
    c.socket.on('disconnect', () => c.close());
    // Over the body limit: the server closes the connection (1009).
    await assert.rejects(c.send('lw:listener-close', { op: 'set', value: 'x'.repeat(10_000) }), { code: 'payload_too_large' });
    await eventually(() => c.socket.state === 'closed', 5000, 'closed by the listener');
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
    await settle();
    assert.equal(c.socket.state, 'closed');
    assert.equal(counts.opened, 1, 'no reconnect');
  } finally {
    c.close();
    timers.restore();
  }
});

test('close() in a status listener as the socket opens: no ping timer left', { skip }, async () => {
  const timers = trackClientTimers();
  const socket = new SyncSocket({ baseUrl: server.url, token, namespace: 'ns1' }, FAST);
  try {
    socket.on('status', (state) => {
      if (state === 'open') socket.close();
    });
    await assert.rejects(socket.connect(), { code: 'closed' });
    await eventually(() => socket.state === 'closed', 5000, 'closed by the listener');
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
  } finally {
    socket.close();
    timers.restore();
  }
});

test('EventStream: close() in a disconnect listener leaves no timer, makes no request', { skip }, async () => {
  const timers = trackClientTimers();
  let fetched = 0;
  // The first answer is a 503, which the stream retries.
  const failingOnce = async (url, init) => {
    fetched++;
    return fetched === 1 ? new Response('{"error": "unavailable", "message": "down"}', { status: 503 }) : fetch(url, init);
  };
  const stream = new EventStream({ baseUrl: server.url, token, namespace: 'ns1', fetch: failingOnce }, 'gc:listener-sse', {
    transport: 'fetch',
    ...FAST,
  });
  try {
    stream.on('disconnect', () => stream.close());
    await eventually(() => stream.state === 'closed', 5000, 'closed by the listener');
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
    await settle();
    assert.equal(fetched, 1, 'no request after close()');
  } finally {
    stream.close();
    timers.restore();
  }
});
