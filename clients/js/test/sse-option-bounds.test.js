// An EventStream's readTimeoutMs and maxEventChars are read where the stream
// is made: `undefined` (an option passed on by a wrapper that was not given
// it) is the default, Infinity is none, anything else but a positive number
// is a RangeError there. Before, the silence timer was set with the value as
// it came: setTimeout takes Infinity, undefined and anything past 2^31 - 1 ms
// as 1 ms, so `readTimeoutMs: Infinity` (the way to turn it off) aborted
// every stream a millisecond after it opened and reopened it for ever, the
// snapshot fetched again each time; and `maxEventChars: NaN` bounded nothing
// (no length is greater than NaN). minReconnectMs and maxReconnectMs
// likewise: undefined made every reconnect delay NaN, which setTimeout takes
// as 1 ms, so a refused stream asked again at once, for ever. A real server,
// and a node:http server that refuses every stream.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { EventStream, SseParser, SyncdClient } from '../src/index.js';
import { eventually, fakeToken, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

/** How long a stream is watched after its op for a reopen that should not come (ms). */
const SETTLE_MS = 300;

for (const [name, readTimeoutMs] of [
  ['Infinity', Infinity],
  ['undefined', undefined],
  ['2 ** 31', 2 ** 31],
]) {
  test(`readTimeoutMs ${name}: the stream stays open`, { skip }, async () => {
    const token = await server.token({ clientId: 61 });
    const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
    const id = `gc:timeout-${name.replace(/\W/g, '')}`;
    let requests = 0;
    const counting = async (url, init) => {
      requests++;
      return fetch(url, init);
    };
    const timers = trackClientTimers();
    const stream = new EventStream({ baseUrl: server.url, token, namespace: 'ns1', fetch: counting }, id, {
      transport: 'fetch',
      readTimeoutMs,
      minReconnectMs: 20,
      maxReconnectMs: 50,
    });
    const disconnects = [];
    stream.on('disconnect', (err) => disconnects.push(err.code));
    try {
      await eventually(() => stream.subscription.synced, 5000, 'synced');
      await writer.increment(id, 3);
      await eventually(() => stream.subscription.value() === 3, 5000, 'the op');
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      assert.deepEqual(disconnects, []);
      assert.equal(requests, 1, 'not reopened');
      assert.equal(stream.state, 'open');
    } finally {
      stream.close();
      writer.close();
      timers.restore();
    }
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
  });
}

test('readTimeoutMs and maxEventChars other than a positive number are refused where the stream is made', () => {
  const config = { baseUrl: 'http://127.0.0.1:9', token: 't', namespace: 'ns1' };
  for (const name of ['readTimeoutMs', 'maxEventChars']) {
    for (const bad of [0, -1, Number.NaN, '45000', null]) {
      assert.throws(
        () => new EventStream(config, 'gc:x', { transport: 'fetch', [name]: bad }),
        (err) => err instanceof RangeError && err.message.includes(name),
        `${name}: ${String(bad)}`,
      );
    }
  }
  for (const bad of [0, -5, Number.NaN]) {
    assert.throws(() => new SseParser(bad), RangeError, `SseParser(${bad})`);
  }
  // Infinity is no bound: a long event goes through.
  const unbounded = new SseParser(Infinity);
  assert.equal(unbounded.events(`data: ${'a'.repeat(1000)}\n\n`)[0].data.length, 1000);
});

test('minReconnectMs and maxReconnectMs undefined are their defaults: a refused stream backs off', async () => {
  let requests = 0;
  const refusing = createServer((req, res) => {
    requests++;
    res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"unavailable","message":"down"}');
  });
  await new Promise((resolve) => refusing.listen(0, '127.0.0.1', resolve));
  const token = fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 600_000, permissions: {} });
  const timers = trackClientTimers();
  const stream = new EventStream({ baseUrl: `http://127.0.0.1:${refusing.address().port}`, token, namespace: 'ns1' }, 'gc:x', {
    transport: 'fetch',
    minReconnectMs: undefined,
    maxReconnectMs: undefined,
  });
  try {
    await eventually(() => requests >= 1, 5000, 'the first request');
    await new Promise((r) => setTimeout(r, 1000));
    // Backing off from 100 ms (50 to 100, then 100 to 200, ...): at most 5 in a second (at 1 ms, 22 here).
    assert.ok(requests <= 6, `${requests} requests`);
  } finally {
    stream.close();
    timers.restore();
    refusing.closeAllConnections();
    await new Promise((resolve) => refusing.close(resolve));
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
});

test('reconnect delays other than a number from 0 to 2^31 - 1 ms are refused where the stream is made', () => {
  const config = { baseUrl: 'http://127.0.0.1:9', token: 't', namespace: 'ns1' };
  for (const name of ['minReconnectMs', 'maxReconnectMs']) {
    for (const bad of [-1, Number.NaN, Infinity, 2 ** 31, '100', null]) {
      assert.throws(
        () => new EventStream(config, 'gc:x', { transport: 'fetch', [name]: bad }),
        (err) => err instanceof RangeError && err.message.includes(name),
        `${name}: ${String(bad)}`,
      );
    }
  }
  const stream = new EventStream(config, 'gc:x', { transport: 'fetch', minReconnectMs: 0, maxReconnectMs: 0 });
  stream.close();
});
