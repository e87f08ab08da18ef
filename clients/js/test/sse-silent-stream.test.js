// An SSE stream (fetch transport) that goes silent is taken as dead and
// reopened, resuming: the server sends a `: ping` comment every
// SERVICE_SSE_PING_S (15 s), so a connection with nothing for
// `readTimeoutMs` (default 45 s, the Python client's SSE_READ_TIMEOUT_S)
// has died on the way (a NAT or proxy dropping it, a laptop asleep), with
// no close to tell. The read waited for ever: the stream stayed `open`,
// its subscription `synced`, and nothing more came. A real server; the
// first stream's bytes stop reaching the client after its start.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EventStream, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

/** A fetch whose first /events body goes silent once its `synced` event is through (the connection stays open). */
function silencingFetch() {
  const state = { streams: 0 };
  state.fetch = async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || !new URL(url).pathname.endsWith('/events') || state.streams++ > 0) return response;
    const reader = response.body.getReader();
    let seen = '';
    const body = new ReadableStream({
      start(controller) {
        init.signal?.addEventListener('abort', () => {
          reader.cancel().catch(() => {});
          controller.error(new DOMException('aborted', 'AbortError'));
        });
      },
      async pull(controller) {
        if (seen.includes('event: synced')) return new Promise(() => {}); // silent from here on
        const { value, done } = await reader.read();
        if (done) return controller.close();
        seen += Buffer.from(value).toString();
        controller.enqueue(value);
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  return state;
}

test('a silent SSE stream is reopened after readTimeoutMs and resumes', { skip }, async () => {
  const timers = trackClientTimers();
  const token = await server.token({ clientId: 51 });
  const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  const silencing = silencingFetch();
  const stream = new EventStream({ baseUrl: server.url, token, namespace: 'ns1', fetch: silencing.fetch }, 'gc:silent', {
    transport: 'fetch',
    readTimeoutMs: 500,
    minReconnectMs: 20,
    maxReconnectMs: 100,
  });
  try {
    const disconnects = [];
    stream.on('disconnect', (err) => disconnects.push(err));
    await eventually(() => stream.subscription.synced, 5000, 'synced');
    await writer.increment('gc:silent', 2);
    await eventually(() => stream.subscription.value() === 2, 5000, 'the op, after a reconnect');
    assert.equal(silencing.streams, 2);
    assert.equal(disconnects[0]?.code, 'timeout');
  } finally {
    stream.close();
    writer.close();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
  timers.restore();
});
