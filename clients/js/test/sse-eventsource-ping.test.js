// The eventsource transport sees a stream go silent. An EventSource hides
// the server's `: ping` comments from its page, so a connection that died
// on the way (a NAT or proxy dropping it, a server frozen) looked the same as
// a quiet stream, and the stream hung for ever. The transport now asks for
// pings as events (`?ping=event`: `event: ping`, empty data), moves its
// silence wait on at each of them and at every event, and after
// `readTimeoutMs` of nothing reopens the stream, resuming.
//
// A real server pinging every second (SERVICE_SSE_PING_S, its minimum), read
// by an EventSource written here on node:http (Node 20 has none) that does
// what a browser's does with the wire: comments dropped, an event with data
// dispatched by its name. Silence comes from a proxy that holds the
// connection open and passes nothing more, and from the server stopped with
// SIGSTOP.

import assert from 'node:assert/strict';
import { get } from 'node:http';
import { createConnection, createServer } from 'node:net';
import { after, before, test } from 'node:test';
import { EventStream, SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
/** The server's ping interval (s): SERVICE_SSE_PING_S's minimum. */
const PING_S = 1;
/** The streams' readTimeoutMs: pings come well within it, a silence passes it soon. */
const READ_TIMEOUT_MS = 3000;

let server;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_SSE_PING_S: String(PING_S) });
});
after(async () => {
  if (server?.proc?.exitCode === null) server.proc.kill('SIGCONT'); // never left stopped
  await server?.close();
});

/**
 * An EventSource as browsers have it, as far as the transport uses it: the
 * `open`, `message` and named events (an event without data, and every
 * comment, are not dispatched), `error` when the connection fails or ends
 * (a browser would then reconnect by itself; the transport closes it first),
 * and `close()`, which closes the connection. Every instance and every event
 * name it dispatched are kept in `made`.
 */
function eventSourceClass() {
  const made = [];
  class NodeEventSource {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.onopen = this.onmessage = this.onerror = null;
      this.dispatched = [];
      this._listeners = new Map();
      made.push(this);
      this._request = get(url, { headers: { accept: 'text/event-stream' } }, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          this._fail();
          return;
        }
        this.readyState = 1;
        this.onopen?.({ type: 'open' });
        this._read(res);
      });
      this._request.on('error', () => this._fail());
    }

    addEventListener(name, listener) {
      if (!this._listeners.has(name)) this._listeners.set(name, []);
      this._listeners.get(name).push(listener);
    }

    close() {
      this.readyState = 2;
      this._request.destroy();
    }

    _fail() {
      if (this.readyState === 2) return;
      this.readyState = 0;
      this.onerror?.({ type: 'error' });
    }

    _read(res) {
      res.setEncoding('utf8');
      let rest = '';
      let name = '';
      let data = null;
      res.on('data', (chunk) => {
        const lines = (rest + chunk).split('\n');
        rest = lines.pop();
        for (const line of lines) {
          if (this.readyState === 2) return;
          if (line === '') {
            if (data !== null) this._dispatch(name || 'message', data);
            name = '';
            data = null;
          } else if (line.startsWith('event:')) {
            name = line.slice(6).trimStart();
          } else if (line.startsWith('data:')) {
            const value = line.slice(line[5] === ' ' ? 6 : 5);
            data = data === null ? value : `${data}\n${value}`;
          }
          // A comment (`:`) is dropped, as a browser drops it.
        }
      });
      res.on('end', () => this._fail());
      res.on('error', () => this._fail());
    }

    _dispatch(type, data) {
      this.dispatched.push(type);
      const event = { type, data };
      if (type === 'message') this.onmessage?.(event);
      for (const listener of this._listeners.get(type) ?? []) listener(event);
    }
  }
  return { NodeEventSource, made };
}

/**
 * A TCP proxy in front of the server: connection `n` passes what the server
 * sends until `silenceAfter(n, sent)` says so (`sent`: what it passed so
 * far), then passes nothing more and holds both sockets open, as a proxy or
 * NAT that lost its way does. `closed` counts client connections that closed.
 */
async function startProxy(target, silenceAfter) {
  const proxy = { connections: 0, closed: 0, sockets: new Set() };
  const srv = createServer((client) => {
    const n = proxy.connections++;
    const upstream = createConnection(target.port, '127.0.0.1');
    proxy.sockets.add(client).add(upstream);
    let sent = '';
    let silent = false;
    client.on('data', (d) => upstream.write(d));
    upstream.on('data', (d) => {
      if (silent) return;
      client.write(d);
      sent += d.toString('latin1');
      silent = silenceAfter(n, sent);
    });
    client.on('close', () => {
      proxy.closed++;
      upstream.destroy();
    });
    upstream.on('close', () => client.destroy());
    client.on('error', () => {});
    upstream.on('error', () => {});
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${srv.address().port}`;
  proxy.close = () => {
    for (const socket of proxy.sockets) socket.destroy();
    return new Promise((resolve) => srv.close(resolve));
  };
  return proxy;
}

function openStream(baseUrl, token, id, NodeEventSource, options = {}) {
  return new EventStream({ baseUrl, token, namespace: 'ns1', EventSource: NodeEventSource }, id, {
    transport: 'eventsource',
    readTimeoutMs: READ_TIMEOUT_MS,
    minReconnectMs: 20,
    maxReconnectMs: 100,
    ...options,
  });
}

test('the eventsource transport asks for ping events, and they keep a quiet stream open past readTimeoutMs', { skip }, async () => {
  const timers = trackClientTimers();
  const token = await server.token({ clientId: 61 });
  const { NodeEventSource, made } = eventSourceClass();
  const stream = openStream(server.url, token, 'gc:es-quiet', NodeEventSource);
  const disconnects = [];
  stream.on('disconnect', (err) => disconnects.push(err.code));
  try {
    await eventually(() => stream.subscription.synced, 5000, 'synced');
    assert.equal(new URL(made[0].url).searchParams.get('ping'), 'event');
    // Nothing but pings for longer than readTimeoutMs: the stream stays.
    const pings = () => made[0].dispatched.filter((type) => type === 'ping').length;
    await eventually(() => pings() >= 4, 15_000, 'four ping events');
    assert.deepEqual(disconnects, []);
    assert.equal(made.length, 1, 'not reopened');
    assert.equal(stream.state, 'open');
  } finally {
    stream.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
});

test('a fetch stream (comments) is not asked for ping events', { skip }, async () => {
  const token = await server.token({ clientId: 62 });
  const urls = [];
  const stream = new EventStream(
    {
      baseUrl: server.url,
      token,
      namespace: 'ns1',
      fetch: (url, init) => {
        urls.push(url);
        return fetch(url, init);
      },
    },
    'gc:es-fetch',
    { transport: 'fetch' },
  );
  try {
    await eventually(() => stream.subscription.synced, 5000, 'synced');
    assert.equal(new URL(urls[0]).searchParams.get('ping'), null);
  } finally {
    stream.close();
  }
});

test('an eventsource stream a proxy holds open silently is reopened after readTimeoutMs and resumes', { skip }, async () => {
  const timers = trackClientTimers();
  const token = await server.token({ clientId: 63 });
  const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  await writer.increment('gc:es-silent', 1);
  // The first connection passes nothing after the start.
  const proxy = await startProxy(server, (n, sent) => n === 0 && sent.includes('event: synced'));
  const { NodeEventSource, made } = eventSourceClass();
  const stream = openStream(proxy.url, token, 'gc:es-silent', NodeEventSource);
  const disconnects = [];
  stream.on('disconnect', (err) => disconnects.push(err.code));
  try {
    await eventually(() => stream.subscription.synced && stream.subscription.value() === 1, 5000, 'synced');
    await writer.increment('gc:es-silent', 2);
    await eventually(() => stream.subscription.value() === 3, 15_000, 'the op, after a reconnect');
    assert.equal(disconnects[0], 'timeout');
    assert.equal(made.length, 2);
    // Reopened asking for ping events again, resuming where the first left off.
    const reopened = new URL(made[1].url).searchParams;
    assert.deepEqual([reopened.get('ping'), reopened.get('since')], ['event', '1']);
    assert.equal(made[0].readyState, 2, 'the silent source closed');
    await eventually(() => proxy.closed >= 1, 5000, 'the silent connection closed');
  } finally {
    stream.close();
    writer.close();
    timers.restore();
    await proxy.close();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
});

test('an eventsource stream of a server stopped with SIGSTOP times out, and goes on once it runs again', { skip }, async () => {
  const timers = trackClientTimers();
  const token = await server.token({ clientId: 64 });
  const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  await writer.increment('gc:es-stopped', 1);
  const { NodeEventSource, made } = eventSourceClass();
  const stream = openStream(server.url, token, 'gc:es-stopped', NodeEventSource);
  const disconnects = [];
  stream.on('disconnect', (err) => disconnects.push(err.code));
  try {
    await eventually(() => stream.subscription.synced && stream.subscription.value() === 1, 5000, 'synced');
    server.proc.kill('SIGSTOP');
    try {
      await eventually(() => disconnects.length > 0, READ_TIMEOUT_MS + 10_000, 'a disconnect');
      assert.equal(disconnects[0], 'timeout');
    } finally {
      server.proc.kill('SIGCONT');
    }
    await writer.increment('gc:es-stopped', 2);
    await eventually(() => stream.subscription.value() === 3, 15_000, 'the op, after a reconnect');
    assert.ok(made.length >= 2);
    // The reopened stream resumed from where the first left off.
    assert.equal(new URL(made.at(-1).url).searchParams.get('since'), '1');
  } finally {
    stream.close();
    writer.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
});
