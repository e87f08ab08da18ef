// A token function still running when the socket or stream is closed: what it
// returns afterwards changes nothing. No connection is made with a good
// token, and a bad one (expired, unreadable) is not reported as an `error` of
// a socket or stream that was already closed. Nothing connects here, so no
// server is needed.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EventStream, SyncSocket } from '../src/index.js';
import { fakeToken } from './helpers.js';

const claims = (expiresAt) => ({ namespace: 'ns1', client_id: 1, expires_at: expiresAt, permissions: {} });
const EXPIRED = fakeToken(claims(Date.now() - 60_000));
const VALID = fakeToken(claims(Date.now() + 60_000));

/** A token function whose answer waits for `release(token)`; `asked` counts the calls. */
function gatedToken() {
  const gate = { asked: 0 };
  gate.token = () => {
    gate.asked++;
    return new Promise((resolve) => (gate.release = resolve));
  };
  return gate;
}

/** A WebSocket that counts the connections made, and makes none. */
function countingWebSocket() {
  const counts = { opened: 0 };
  class Counting {
    constructor() {
      counts.opened++;
    }
    close() {}
  }
  return { counts, Counting };
}

const settle = () => new Promise((r) => setTimeout(r, 20));

for (const [what, token] of [
  ['an expired token', EXPIRED],
  ['a good token', VALID],
]) {
  test(`SyncSocket: ${what} from a token function after close() is not used nor reported`, async () => {
    const gate = gatedToken();
    const { counts, Counting } = countingWebSocket();
    const socket = new SyncSocket({ baseUrl: 'http://127.0.0.1:9', namespace: 'ns1', token: gate.token, WebSocket: Counting });
    const errors = [];
    socket.on('error', (err) => errors.push(err));
    const opened = socket.connect();
    await settle();
    assert.equal(gate.asked, 1);
    socket.close();
    await assert.rejects(opened, { code: 'closed' });
    gate.release(token);
    await settle();
    assert.deepEqual(errors, []);
    assert.equal(counts.opened, 0);
    assert.equal(socket.state, 'closed');
  });

  test(`EventStream: ${what} from a token function after close() is not used nor reported`, async () => {
    const gate = gatedToken();
    let fetched = 0;
    const fetching = () => {
      fetched++;
      return new Promise(() => {});
    };
    const stream = new EventStream({ baseUrl: 'http://127.0.0.1:9', namespace: 'ns1', token: gate.token, fetch: fetching }, 'gc:late', {
      transport: 'fetch',
    });
    const errors = [];
    stream.on('error', (err) => errors.push(err));
    await settle();
    assert.equal(gate.asked, 1);
    stream.close();
    gate.release(token);
    await settle();
    assert.deepEqual(errors, []);
    assert.equal(fetched, 0);
    assert.equal(stream.state, 'closed');
  });
}
