// A stream closed by a listener while a chunk of events is being read stops
// there: the events after it in the same chunk (here the `end` the server
// sends when the token is revoked) are not acted on, so no `error` (nor
// `disconnect`) comes from a stream already closed. A real server; its bytes
// are handed over in one chunk, as TCP may deliver them.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EventStream } from '../src/index.js';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

/**
 * A fetch whose /events body arrives as one chunk, once the server's `end`
 * event is in; `responded` turns true when the stream's answer came.
 */
function coalescingFetch() {
  const state = { responded: false };
  state.fetch = async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || !new URL(url).pathname.endsWith('/events')) return response;
    state.responded = true;
    const reader = response.body.getReader();
    const body = new ReadableStream({
      async start(controller) {
        const parts = [];
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parts.push(value);
          if (Buffer.concat(parts).toString().includes('event: end')) break;
        }
        controller.enqueue(new Uint8Array(Buffer.concat(parts)));
        controller.close();
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  return state;
}

test('close() from a listener: the rest of the chunk (an end event) is not acted on', { skip }, async () => {
  const token = await server.token({ clientId: 95 });
  const net = coalescingFetch();
  const stream = new EventStream({ baseUrl: server.url, namespace: 'ns1', token, fetch: net.fetch }, 'gc:mid-chunk', {
    transport: 'fetch',
  });
  const errors = [];
  const disconnects = [];
  stream.on('error', (err) => errors.push(err));
  stream.on('disconnect', (err) => disconnects.push(err));
  let changes = 0;
  stream.subscription.on('change', () => {
    changes++;
    stream.close();
  });
  await eventually(() => net.responded, 5000, 'the stream answered');
  const r = await fetch(`${server.url}/v1/namespaces/ns1/revocations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ client_id: 95 }),
  });
  assert.equal(r.status, 200, await r.text());
  await eventually(() => changes > 0, 5000, 'the chunk read');
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(stream.state, 'closed');
  assert.deepEqual(errors, [], 'no error from a closed stream');
  assert.deepEqual(disconnects, []);
});
