// A SyncSocket's timer options are read where the socket is made: `undefined`
// (an option passed on by a wrapper that was not given it) is the default;
// pingIntervalMs, pongTimeoutMs, resyncTimeoutMs and connectTimeoutMs take
// Infinity (or anything past 2^31 - 1 ms) for off; minReconnectMs and
// maxReconnectMs take 0 to 2^31 - 1 ms; anything else is a RangeError there.
// Before, the options were spread over the defaults as they came, and
// setTimeout and setInterval take undefined, NaN, Infinity and anything past
// 2^31 - 1 ms as 1 ms: pingIntervalMs Infinity (the way to turn pings off)
// or undefined sent a ping every millisecond, connectTimeoutMs undefined
// abandoned every connection a millisecond into it, and a reconnect delay
// undefined (NaN) asked again at once, for ever. As the SSE side
// (sse-option-bounds.test.js). A real server, a WebSocket that counts what
// it does, and a port nothing listens on.

import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, test } from 'node:test';
import { DEFAULTS, SyncSocket } from '../src/ws.js';
import { SyncdClient } from '../src/index.js';
import { eventually, fakeToken, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  token = await server.token({ clientId: 67 });
});
after(() => server?.close());

/** How long an open socket is watched for pings or reconnects that should not come (ms). */
const SETTLE_MS = 500;

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

/** Open a socket to the real server with `options`; how it went over SETTLE_MS after it opened. */
async function watchOpenSocket(options) {
  const { counts, Counting } = countingWebSocket();
  const timers = trackClientTimers();
  const socket = new SyncSocket({ baseUrl: server.url, token, namespace: 'ns1', WebSocket: Counting }, options);
  const disconnects = [];
  socket.on('disconnect', (err) => disconnects.push(err.code));
  try {
    await socket.connect();
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    return { counts, disconnects, state: socket.state };
  } finally {
    socket.close();
    timers.restore();
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
  }
}

for (const [name, value] of [
  ['Infinity', Infinity],
  ['undefined', undefined],
  ['2 ** 31', 2 ** 31],
]) {
  test(`pingIntervalMs ${name}: no ping a millisecond`, { skip }, async () => {
    const { counts, disconnects, state } = await watchOpenSocket({ pingIntervalMs: value });
    // No ping at all in SETTLE_MS (the default is one in 15 s); at 1 ms, hundreds.
    assert.equal(counts.sent, 0, `${counts.sent} frames sent`);
    assert.deepEqual(disconnects, []);
    assert.equal(state, 'open');
  });

  test(`connectTimeoutMs ${name}: the connection opens and stays`, { skip }, async () => {
    const { counts, disconnects, state } = await watchOpenSocket({ connectTimeoutMs: value });
    assert.equal(counts.opened, 1, `${counts.opened} connections`);
    assert.deepEqual(disconnects, []);
    assert.equal(state, 'open');
  });
}

test('pongTimeoutMs Infinity: pings go at their interval and the socket stays', { skip }, async () => {
  const pingIntervalMs = 100;
  const { counts, disconnects, state } = await watchOpenSocket({ pingIntervalMs, pongTimeoutMs: Infinity });
  assert.ok(counts.sent >= 2 && counts.sent <= SETTLE_MS / pingIntervalMs + 1, `${counts.sent} pings`);
  assert.deepEqual(disconnects, []);
  assert.equal(state, 'open');
});

test('undefined options are their defaults', () => {
  const config = { baseUrl: 'http://127.0.0.1:9', token: 't', namespace: 'ns1', WebSocket: class {} };
  const undefinedOptions = Object.fromEntries(Object.keys(DEFAULTS).map((name) => [name, undefined]));
  const socket = new SyncSocket(config, undefinedOptions);
  for (const name of ['minReconnectMs', 'maxReconnectMs', 'pingIntervalMs', 'pongTimeoutMs', 'resyncTimeoutMs', 'connectTimeoutMs']) {
    assert.equal(socket.options[name], DEFAULTS[name], name);
  }
  socket.close();
});

test('reconnect delays undefined are their defaults: a refused socket backs off', async () => {
  // A port that refuses every connection: taken, then closed.
  const taken = createServer();
  await new Promise((resolve) => taken.listen(0, '127.0.0.1', resolve));
  const { port } = taken.address();
  await new Promise((resolve) => taken.close(resolve));
  const { counts, Counting } = countingWebSocket();
  const claims = { namespace: 'ns1', client_id: 1, expires_at: Date.now() + 600_000, permissions: {} };
  const timers = trackClientTimers();
  const socket = new SyncSocket(
    { baseUrl: `http://127.0.0.1:${port}`, token: fakeToken(claims), namespace: 'ns1', WebSocket: Counting },
    { minReconnectMs: undefined, maxReconnectMs: undefined },
  );
  socket.connect().catch(() => {});
  try {
    await eventually(() => counts.opened >= 1, 5000, 'the first attempt');
    await new Promise((r) => setTimeout(r, 1000));
    // Backing off from 100 ms (50 to 100, then 100 to 200, ...): at most 5 in a second (at 1 ms, hundreds).
    assert.ok(counts.opened <= 6, `${counts.opened} attempts`);
  } finally {
    socket.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
});

test('timer options out of bounds are a RangeError where the socket is made', () => {
  const config = { baseUrl: 'http://127.0.0.1:9', token: 't', namespace: 'ns1', WebSocket: class {} };
  for (const name of ['pingIntervalMs', 'pongTimeoutMs', 'resyncTimeoutMs', 'connectTimeoutMs']) {
    for (const bad of [0, -1, Number.NaN, '15000', null]) {
      assert.throws(
        () => new SyncSocket(config, { [name]: bad }),
        (err) => err instanceof RangeError && err.message.includes(name),
        `${name}: ${String(bad)}`,
      );
    }
  }
  for (const name of ['minReconnectMs', 'maxReconnectMs']) {
    for (const bad of [-1, Number.NaN, Infinity, 2 ** 31, '100', null]) {
      assert.throws(
        () => new SyncSocket(config, { [name]: bad }),
        (err) => err instanceof RangeError && err.message.includes(name),
        `${name}: ${String(bad)}`,
      );
    }
  }
  // Through the client: checked when it is made, before its socket (client-socket-options.test.js).
  const valid = fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 600_000, permissions: {} });
  assert.throws(() => new SyncdClient({ ...config, token: valid }, { socket: { pingIntervalMs: Number.NaN } }), RangeError);
  new SyncSocket(config, { minReconnectMs: 0, maxReconnectMs: 0, pongTimeoutMs: 2 ** 31 }).close();
});
