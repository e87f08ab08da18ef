// Streams the server ends (docs/permissions.md#when-access-ends and
// #revoking-tokens): the SSE `end` event and the WebSocket's token errors end
// the stream with the error, instead of being taken for a delta or a dropped
// connection and reconnecting for ever.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  EventStream,
  SseParser,
  SyncdError,
  SyncSocket,
  TokenRevokedError,
  endError,
} from '../src/index.js';
import { ADMIN, eventually, fakeToken, serverMissing, startServer } from './helpers.js';

const FAST = { minReconnectMs: 20, maxReconnectMs: 100 };
const REVOKED_BODY = '{"error": "token_revoked", "message": "token revoked"}';

describe('the end event', () => {
  test('the parser names events; feed() keeps only the deltas', () => {
    const stream = `data: AQ==\n\n: ping\n\nevent: end\ndata: ${REVOKED_BODY}\n\n`;
    assert.deepEqual(new SseParser().events(stream), [
      { event: 'message', data: 'AQ==' },
      { event: 'end', data: REVOKED_BODY },
    ]);
    assert.deepEqual(new SseParser().feed(stream), ['AQ==']);
    // The name lasts one event; a named event without data is not dispatched.
    const p = new SseParser();
    assert.deepEqual(p.events('event: end\n\ndata: Ag==\r\n\r\n'), [{ event: 'message', data: 'Ag==' }]);
  });

  test('its data is the error', () => {
    const revoked = endError(REVOKED_BODY);
    assert.ok(revoked instanceof TokenRevokedError && revoked instanceof SyncdError);
    assert.equal(revoked.code, 'token_revoked');
    assert.equal(revoked.status, 401);
    const expired = endError('{"error": "token_expired", "message": "token expired"}');
    assert.equal(expired.code, 'token_expired');
    assert.equal(expired.status, 401);
    const ruled = endError('{"error": "forbidden", "message": "the read permission for \'gc:a\' expired"}');
    assert.equal(ruled.status, 403);
    assert.equal(endError('not json').code, 'bad_event');
  });

  test('over EventSource: the end event closes the stream with the error', async () => {
    const sources = [];
    class FakeEventSource {
      constructor(url) {
        this.url = url;
        this.listeners = {};
        this.closed = false;
        sources.push(this);
      }
      addEventListener(name, handler) {
        this.listeners[name] = handler;
      }
      close() {
        this.closed = true;
      }
    }
    const token = fakeToken({ namespace: 'ns1', client_id: 1, expires_at: Date.now() + 60000, permissions: {} });
    const stream = new EventStream(
      { baseUrl: 'http://127.0.0.1:9', namespace: 'ns1', token },
      'gc:a',
      { transport: 'eventsource', EventSource: FakeEventSource, ...FAST },
    );
    const errors = [];
    stream.on('error', (err) => errors.push(err));
    await eventually(() => sources.length === 1, 2000, 'the EventSource');
    sources[0].listeners.end({ data: REVOKED_BODY });
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof TokenRevokedError);
    assert.equal(stream.state, 'closed');
    assert.ok(sources[0].closed);
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(sources.length, 1, 'no reconnect');
  });
});

describe('ended by a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(() => server?.close());

  const revoke = async (clientId) => {
    const r = await fetch(`${server.url}/v1/namespaces/ns1/revocations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ client_id: clientId }),
    });
    assert.equal(r.status, 200, await r.text());
  };

  const opened = (stream) =>
    new Promise((resolve) => {
      stream.subscription.on('change', resolve);
    });

  test('SSE: a revoked token ends the stream with TokenRevokedError', async () => {
    const token = await server.token({ clientId: 31 });
    const stream = new EventStream({ baseUrl: server.url, namespace: 'ns1', token }, 'gc:rev', { transport: 'fetch', ...FAST });
    const errors = [];
    const disconnects = [];
    stream.on('error', (err) => errors.push(err));
    stream.on('disconnect', (err) => disconnects.push(err));
    let ended = null;
    stream.subscription.on('close', (why) => (ended = why));
    await opened(stream);
    await revoke(31);
    await eventually(() => stream.state === 'closed', 2000, 'the stream closed');
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof TokenRevokedError, String(errors[0]));
    assert.deepEqual(disconnects, []);
    assert.equal(stream.subscription.closed, true);
    assert.equal(ended, errors[0], 'the subscription ended with the error');
  });

  test('SSE: an expired (fixed) token ends the stream with token_expired', async () => {
    const token = await server.token({ clientId: 32, ttlMs: 1500 });
    const stream = new EventStream({ baseUrl: server.url, namespace: 'ns1', token }, 'gc:exp', { transport: 'fetch', ...FAST });
    const errors = [];
    stream.on('error', (err) => errors.push(err));
    await opened(stream);
    await eventually(() => stream.state === 'closed', 5000, 'the stream closed');
    assert.equal(errors.length, 1);
    assert.equal(errors[0].code, 'token_expired');
    assert.equal(errors[0].status, 401);
  });

  test('SSE: a refusal asking again cannot change (400) ends the stream instead of retrying', async () => {
    const token = await server.token({ clientId: 35 });
    // The real server's 400 for a malformed `since`, as a broken proxy or an
    // old server might answer any stream.
    const breaking = (url, init) => fetch(`${url}${url.includes('?') ? '&' : '?'}since=not-a-number`, init);
    const stream = new EventStream({ baseUrl: server.url, namespace: 'ns1', token, fetch: breaking }, 'gc:bad', {
      transport: 'fetch',
      ...FAST,
    });
    const errors = [];
    const disconnects = [];
    stream.on('error', (err) => errors.push(err));
    stream.on('disconnect', (err) => disconnects.push(err));
    await eventually(() => stream.state === 'closed', 2000, 'the stream closed');
    assert.deepEqual([errors[0].status, errors[0].code], [400, 'bad_request']);
    assert.deepEqual(disconnects, []);
  });

  test('WebSocket: a revoked token closes the socket with TokenRevokedError', async () => {
    const token = await server.token({ clientId: 33 });
    const socket = new SyncSocket({ baseUrl: server.url, namespace: 'ns1', token }, FAST);
    const errors = [];
    socket.on('error', (err) => errors.push(err));
    const sub = socket.subscribe('gc:ws');
    const subErrors = [];
    sub.on('error', (err) => subErrors.push(err));
    await new Promise((resolve) => sub.on('change', resolve));
    await revoke(33);
    await eventually(() => socket.state === 'closed', 2000, 'the socket closed');
    assert.ok(errors[0] instanceof TokenRevokedError, String(errors[0]));
    assert.ok(subErrors[0] instanceof TokenRevokedError);
    await assert.rejects(socket.op('gc:ws', { op: 'increment' }), { code: 'closed' });
  });

  test("WebSocket: a fixed token the server calls expired ends the socket, whatever this clock says", async () => {
    // This machine's clock runs a minute behind the server's: the token still
    // looks valid here, so only the server's word can stop the reconnects.
    const token = await server.token({ clientId: 34, ttlMs: 1500 });
    const realNow = Date.now;
    Date.now = () => realNow() - 60_000;
    try {
      const socket = new SyncSocket({ baseUrl: server.url, namespace: 'ns1', token }, FAST);
      const errors = [];
      const disconnects = [];
      socket.on('error', (err) => errors.push(err));
      socket.on('disconnect', (err) => disconnects.push(err));
      const sub = socket.subscribe('gc:ws-exp');
      const subErrors = [];
      sub.on('error', (err) => subErrors.push(err));
      await new Promise((resolve) => sub.on('change', resolve));
      await eventually(() => socket.state === 'closed', 5000, 'the socket closed');
      assert.equal(errors[0].code, 'token_expired');
      assert.equal(errors[0].status, 401);
      assert.equal(subErrors[0].code, 'token_expired');
      assert.deepEqual(disconnects, [], 'no reconnect with a token the server refuses');
    } finally {
      Date.now = realNow;
    }
  });
});
