// One SSE event is bounded (MAX_EVENT_CHARS, 128 Mi characters, twice the
// server's default SERVICE_MAX_CRDT_BYTES; `maxEventChars` to set it): a stream whose event
// passes it (a broken or hostile server or proxy, never ending a line or an
// event) ends with a SyncdError `message_too_large` instead of holding all of
// it in memory, and is not reopened (it would only be sent again). A real
// server; a snapshot larger than a small bound.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EventStream, MAX_EVENT_CHARS, SseParser, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

test('the parser refuses an event past its bound, in one line or in several', () => {
  assert.equal(MAX_EVENT_CHARS, 128 * 1024 * 1024);
  const tooLong = (fn) => assert.throws(fn, (err) => err.code === 'message_too_large');
  const p = new SseParser(100);
  assert.deepEqual(p.events(`data: ${'a'.repeat(90)}\n\n`), [{ event: 'message', data: 'a'.repeat(90) }]);
  tooLong(() => {
    for (let i = 0; i < 20; i++) p.events('a'.repeat(10)); // a line that never ends
  });
  const q = new SseParser(100);
  tooLong(() => {
    for (let i = 0; i < 20; i++) q.events(`data: ${'b'.repeat(9)}\n`); // an event that never ends
  });
});

test('a stream whose event passes maxEventChars ends with message_too_large', { skip }, async () => {
  const token = await server.token({ clientId: 53 });
  const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  await writer.set('lw:big', 'x'.repeat(20_000));
  const timers = trackClientTimers();
  let requests = 0;
  const counting = async (url, init) => {
    requests++;
    return fetch(url, init);
  };
  const stream = new EventStream({ baseUrl: server.url, token, namespace: 'ns1', fetch: counting }, 'lw:big', {
    transport: 'fetch',
    maxEventChars: 10_000,
    minReconnectMs: 10,
    maxReconnectMs: 20,
  });
  try {
    const errors = [];
    const ends = [];
    stream.on('error', (err) => errors.push(err));
    stream.subscription.on('close', (why) => ends.push(why));
    await eventually(() => stream.state === 'closed', 5000, 'the stream ended');
    assert.equal(errors[0]?.code, 'message_too_large');
    assert.equal(ends[0]?.code, 'message_too_large');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(requests, 1, 'not reopened');
  } finally {
    stream.close();
    writer.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), []);
});
