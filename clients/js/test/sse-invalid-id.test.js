// An EventStream of an invalid CRDT id throws where it is made (a TypeError,
// as SyncSocket.subscribe and the HTTP calls do), nothing sent: it was taken
// for a connection failure at every attempt and retried at every backoff, for ever.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EventStream, SyncdClient } from '../src/index.js';
import { fakeToken, trackClientTimers } from './helpers.js';

const TOKEN = fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 60_000, permissions: {} });

test('an invalid id throws at construction, leaving no timer', () => {
  const timers = trackClientTimers();
  let fetched = 0;
  const config = { baseUrl: 'http://127.0.0.1:9', token: TOKEN, namespace: 'ns1', fetch: async () => fetched++ };
  try {
    for (const id of ['bad id', '', 'x'.repeat(257), 'a/b']) {
      assert.throws(() => new EventStream(config, id, { minReconnectMs: 1, maxReconnectMs: 2 }), TypeError, id);
      assert.throws(() => new SyncdClient(config).events(id), TypeError, id);
    }
    assert.deepEqual(timers.pending(), []);
    assert.equal(fetched, 0);
  } finally {
    timers.restore();
  }
});
