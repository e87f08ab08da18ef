// Events that arrived in the same chunk as, and before, an SSE event past
// `maxEventChars` are delivered; then the stream ends with
// `message_too_large`. The parser threw at the oversize event as it went
// through the chunk, and the whole events it had completed before it were
// lost with it: one read may hold several events (a batch's deltas, written
// together). A real server; its bytes after the stream's start handed over
// as one chunk, as TCP may deliver them.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EventStream, SseParser, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

const MAX_EVENT_CHARS = 4096;
/** Over MAX_EVENT_CHARS once in base64 msgpack; the small value's event is far under. */
const LARGE_VALUE_CHARS = 8000;
/** Characters after the start to hand over at once: the small event and more of the large one than the bound. */
const COALESCE_CHARS = MAX_EVENT_CHARS + 2000;

test('the parser returns the events before an oversize one, then throws', () => {
  const tooLong = (err) => err.code === 'message_too_large';
  const p = new SseParser(100);
  assert.deepEqual(p.events(`data: small\n\n: ping\ndata: ${'a'.repeat(200)}`), [{ event: 'message', data: 'small' }]);
  assert.equal(p.error?.code, 'message_too_large');
  assert.throws(() => p.events('\n\n'), tooLong);
  const q = new SseParser(100);
  assert.deepEqual(q.feed(`data: one\n\ndata: ${'b'.repeat(200)}\n\ndata: two\n\n`), ['one']);
  assert.throws(() => q.feed(''), tooLong);
  const r = new SseParser(100);
  assert.throws(() => r.events(`data: ${'c'.repeat(200)}`), tooLong); // nothing before it: at once
  assert.throws(() => r.events('data: d\n\n'), tooLong);
});

/** A fetch whose /events body, once the start (`event: synced`) is through, comes in one chunk of COALESCE_CHARS, then as it arrives. */
function coalescingFetch() {
  return async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || !new URL(url).pathname.endsWith('/events')) return response;
    const reader = response.body.getReader();
    const body = new ReadableStream({
      async start(controller) {
        let started = false;
        let held = [];
        let heldChars = 0;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          if (!started) {
            controller.enqueue(value);
            started = Buffer.from(value).toString().includes('event: synced');
            continue;
          }
          held.push(value);
          heldChars += value.length;
          if (heldChars >= COALESCE_CHARS) {
            controller.enqueue(new Uint8Array(Buffer.concat(held)));
            held = [];
            heldChars = -Infinity; // from here on, as it comes
          } else if (heldChars < 0) {
            controller.enqueue(new Uint8Array(Buffer.concat(held)));
            held = [];
          }
        }
        if (held.length > 0) controller.enqueue(new Uint8Array(Buffer.concat(held)));
        controller.close();
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

test('the deltas before an oversize event are delivered, then the stream ends', { skip }, async () => {
  const token = await server.token({ clientId: 96 });
  const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  const id = 'lw:before-oversize';
  await writer.set(id, 'start');
  const stream = new EventStream({ baseUrl: server.url, token, namespace: 'ns1', fetch: coalescingFetch() }, id, {
    transport: 'fetch',
    maxEventChars: MAX_EVENT_CHARS,
  });
  try {
    const deltas = [];
    const errors = [];
    stream.subscription.on('delta', (d) => deltas.push(d));
    stream.on('error', (err) => errors.push(err));
    await eventually(() => stream.subscription.synced, 10000, 'the start');
    await writer.apply(id, [
      { op: 'set', value: 'small' },
      { op: 'set', value: 'x'.repeat(LARGE_VALUE_CHARS) },
    ]);
    await eventually(() => stream.state === 'closed', 10000, 'the stream ended');
    assert.deepEqual(
      deltas.map((d) => [d.kind, d.op?.value]),
      [
        ['snapshot', undefined],
        ['op', 'small'],
      ],
    );
    assert.equal(errors.length, 1);
    assert.equal(errors[0].code, 'message_too_large');
  } finally {
    stream.close();
    writer.close();
  }
});
