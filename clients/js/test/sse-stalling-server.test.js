// The fetch transport against a real HTTP server (node:http) that goes
// wrong on the wire, where a wrapped fetch cannot show what the socket does:
// one that takes the request and never answers, one that stops in the
// middle of an event's line, and one whose event never ends. The silence
// timeout (readTimeoutMs) covers the wait for the head and a stop inside a
// line alike, and each abort closes the connection (the server sees it go:
// no socket is left open behind a stream that moved on); the event bound
// (maxEventChars) ends the stream with `message_too_large`, closes the
// connection the server is still writing to, and does not ask again.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { EventStream } from '../src/index.js';
import { eventually, fakeToken, trackClientTimers } from './helpers.js';

/** A token the client takes (it is never checked: these servers are not syncd). */
const TOKEN = fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 600_000, permissions: {} });

/** A server answering each /events request with `respond(req, res, n)` (n counts from 0); `closed` counts closed connections. */
async function startWire(respond) {
  const wire = { requests: 0, closed: 0 };
  const server = createServer((req, res) => {
    const n = wire.requests++;
    req.socket.once('close', () => wire.closed++);
    respond(req, res, n);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  wire.url = `http://127.0.0.1:${server.address().port}`;
  wire.close = () => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  };
  return wire;
}

const STREAM_HEAD = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };

function openStream(wire, options) {
  return new EventStream({ baseUrl: wire.url, token: TOKEN, namespace: 'ns1' }, 'gc:wire', {
    transport: 'fetch',
    minReconnectMs: 20,
    maxReconnectMs: 40,
    ...options,
  });
}

for (const [name, stall] of [
  ['before its head', () => {}],
  ['inside a line', (res) => {
    res.writeHead(200, STREAM_HEAD);
    res.write(': ping\n\ndata: aGVsbG');
  }],
]) {
  test(`a server that stops ${name} is left after readTimeoutMs, its connection closed`, async () => {
    const wire = await startWire((req, res) => stall(res));
    const timers = trackClientTimers();
    const stream = openStream(wire, { readTimeoutMs: 200 });
    const disconnects = [];
    stream.on('disconnect', (err) => disconnects.push(err.code));
    try {
      await eventually(() => wire.requests >= 2, 5000, 'asked again');
      await eventually(() => wire.closed >= 1, 5000, 'the first connection closed');
      assert.equal(disconnects[0], 'timeout');
    } finally {
      stream.close();
      timers.restore();
    }
    await eventually(() => wire.closed === wire.requests, 5000, 'every connection closed');
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
    await wire.close();
  });
}

test('an event that never ends ends the stream with message_too_large, its connection closed, not asked again', async () => {
  const CHUNK = 'a'.repeat(64 * 1024);
  let written = 0;
  const wire = await startWire((req, res) => {
    res.writeHead(200, STREAM_HEAD);
    res.write('data: ');
    // As fast as the client takes it, for ever.
    const more = () => {
      while (!res.destroyed && res.write(CHUNK)) written += CHUNK.length;
    };
    res.on('drain', more);
    more();
  });
  const timers = trackClientTimers();
  const stream = openStream(wire, { maxEventChars: 1024 * 1024 });
  const ends = [];
  stream.subscription.on('close', (why) => ends.push(why.code));
  try {
    await eventually(() => stream.state === 'closed', 10000, 'the stream ended');
    assert.deepEqual(ends, ['message_too_large']);
    await eventually(() => wire.closed === 1, 5000, 'the connection closed');
    const writtenAtClose = written;
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(wire.requests, 1, 'not asked again');
    assert.equal(written, writtenAtClose, 'nothing more written');
  } finally {
    stream.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
  await wire.close();
});
