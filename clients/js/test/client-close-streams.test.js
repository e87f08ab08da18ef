// SyncdClient.close() is for good for its SSE streams too: the streams made by
// client.events() close with it (their subscriptions end, no timer is left, no
// request follows, even for a stream waiting to reconnect), and events()
// after close() throws the SyncdError `closed` subscribe() throws.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient, SyncdError } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
let server;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  token = await server.token({ clientId: 91 });
});
after(() => server?.close());

const isClosed = (err) => err instanceof SyncdError && err.code === 'closed';

/**
 * A fetch that counts the /events requests made through it, and fails (as
 * fetch does when the service cannot be reached) those of ids holding "unreachable".
 */
function countingFetch() {
  const counts = { events: 0 };
  const fetching = async (url, init) => {
    const { pathname } = new URL(url);
    if (pathname.endsWith('/events')) counts.events++;
    if (pathname.includes('unreachable')) throw new TypeError('fetch failed');
    return fetch(url, init);
  };
  return { counts, fetching };
}

test("close() closes the client's SSE streams, open or reconnecting", { skip }, async () => {
  const timers = trackClientTimers();
  const { counts, fetching } = countingFetch();
  const c = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1', fetch: fetching });
  try {
    const open = c.events('gc:streams-open', { transport: 'fetch', ...FAST });
    await eventually(() => open.subscription.synced, 5000, 'the stream synced');
    // A stream that cannot reach the service waits to reconnect (a timer).
    const waiting = c.events('gc:streams-unreachable', { transport: 'fetch', minReconnectMs: 5000, maxReconnectMs: 5000 });
    await eventually(() => timers.pending().some((t) => t.delay >= 2500), 5000, 'the stream waits to reconnect');

    c.close();
    for (const stream of [open, waiting]) {
      assert.equal(stream.state, 'closed');
      assert.equal(stream.subscription.closed, true);
    }
    assert.deepEqual(timers.pending(), [], 'no timer of the client is left after close()');
    assert.throws(() => c.events('gc:streams-after'), isClosed);
    const atClose = counts.events;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(counts.events, atClose, 'no stream request after close()');
  } finally {
    c.close();
    timers.restore();
  }
});
