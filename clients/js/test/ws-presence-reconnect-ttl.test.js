// A presence entry announced again after a reconnect keeps the TTL the app
// gave it: the socket sends what is left of it, so reconnects do not keep an
// entry the app stopped renewing alive past its time.
//
// The connection is dropped by cutting it at a TCP proxy in front of the
// server, not by restarting the server: a restart takes seconds on a loaded
// machine (2.8 to 3.2 s measured at load 6 on two cores), longer than the
// TTL, so the entry had run out before the socket was back and the client
// rightly announced nothing (the newest op was the old connection's `leave`,
// and the test failed expecting `update`). A cut is seen by both ends at
// once and the socket is back within its reconnect delay, well inside the
// TTL; the cut comes CUT_AFTER_MS into it, so an announce carrying a whole
// new TTL would end that much past the app's.
//
// With the machine loaded the announce still ended 100 to 126 ms past the
// app's TTL: the socket counted the TTL from the update's ack, not from its
// send, so the entry it kept (and announced) was late by the round trip. It
// now counts from the send; the proxy holds the server's answers ANSWER_DELAY_MS
// while the update is sent, so a socket counting from the ack is caught on
// any machine. What is left is the announce's own way to the server (the
// server counts its TTL from its arrival): measured, and allowed.

import assert from 'node:assert/strict';
import { connect, createServer } from 'node:net';
import { after, before, test } from 'node:test';
import { SyncdClient, ops } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;

/** The entry's TTL (ms): the reconnect has TTL_MS - CUT_AFTER_MS to finish, far more than a cut needs. */
const TTL_MS = 5000;
/** When the connection is cut (ms after the update): an announce with a fresh TTL would end this much late. */
const CUT_AFTER_MS = 1000;
/** Slack for rounding to whole ms between this clock and the server's (same machine). */
const CLOCK_SLACK_MS = 10;
/** How long the proxy holds the server's answers to the update (its ack comes this late). */
const ANSWER_DELAY_MS = 300;

/**
 * A TCP proxy to `port` whose open connections `cut()` closes at once, both
 * sides: the server sees the WebSocket end as the client does. While
 * `answerDelayMs` is set, what the server sends is held that long (in order).
 */
async function startProxy(port) {
  const pairs = new Set();
  let control;
  const proxy = createServer((downstream) => {
    const upstream = connect(port, '127.0.0.1');
    const pair = [downstream, upstream];
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      downstream.destroy();
      upstream.destroy();
    };
    for (const socket of pair) {
      socket.on('error', end);
      socket.on('close', end);
    }
    downstream.pipe(upstream);
    upstream.on('data', (chunk) => {
      if (control.answerDelayMs > 0) setTimeout(() => downstream.write(chunk), control.answerDelayMs);
      else downstream.write(chunk);
    });
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const cut = () => {
    for (const pair of [...pairs]) for (const socket of pair) socket.destroy();
    pairs.clear();
  };
  control = {
    url: `http://127.0.0.1:${proxy.address().port}`,
    answerDelayMs: 0,
    cut,
    close: () => {
      cut();
      return new Promise((resolve) => proxy.close(resolve));
    },
  };
  return control;
}

let server;
let proxy;
let token;
before(async () => {
  if (skip) return;
  server = await startServer();
  proxy = await startProxy(server.port);
  token = await server.token({ clientId: 31 });
});
after(async () => {
  await proxy?.close();
  await server?.close();
});

test('a presence entry announced after a reconnect still ends at its first TTL', { skip }, async () => {
  const c = new SyncdClient(
    { baseUrl: proxy.url, token, namespace: 'ns1' },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  try {
    await c.socket.connect();
    proxy.answerDelayMs = ANSWER_DELAY_MS;
    const t0 = Date.now();
    await c.send('pr:ttl', ops.updatePresence({ name: 'ann' }, { ttlMs: TTL_MS }));
    assert.ok(Date.now() - t0 >= ANSWER_DELAY_MS, 'the ack was held');
    proxy.answerDelayMs = 0;
    let reopened = 0;
    let reopenedAt = 0;
    c.socket.on('open', () => {
      reopened++;
      reopenedAt = Date.now(); // the announce went out just before
    });
    await new Promise((r) => setTimeout(r, Math.max(0, t0 + CUT_AFTER_MS - Date.now())));
    proxy.cut();
    await eventually(() => reopened === 1 && c.socket.state === 'open' && c.socket.pendingOps === 0, 5000, 'announced again');
    const back = Date.now() - t0;
    assert.ok(back < TTL_MS, `the socket was back ${back} ms after the update, past the TTL: nothing to announce`);
    const history = await c.history('pr:ttl');
    const [announce] = history.ops; // newest first
    assert.equal(announce.op.op, 'update', 'the entry was announced again');
    const first = history.ops.at(-1).op;
    assert.equal(first.expires_at, first.stamp + TTL_MS, 'the first update, its TTL from its arrival');
    // The entry ends when its first TTL runs out (the announce may round it
    // up to the server's minimum TTL, 1 s), not a whole TTL after the
    // reconnect, nor the update's round trip later: late only by the
    // announce's way to the server, which counts the TTL it carries from its
    // arrival.
    const announceWayMs = Math.max(0, announce.op.stamp - reopenedAt);
    assert.ok(
      announce.op.expires_at <= Math.max(first.expires_at + announceWayMs + CLOCK_SLACK_MS, announce.op.stamp + 1000),
      `expires ${announce.op.expires_at - first.expires_at} ms after the first update's end (the announce took ${announceWayMs} ms)`,
    );
    // Past its end: the app's TTL, or the server's minimum from the announce
    // when a slow reconnect left less than that (same machine, same clock).
    const end = Math.max(t0 + TTL_MS, announce.op.expires_at);
    await new Promise((r) => setTimeout(r, Math.max(0, end + 300 - Date.now())));
    const { value } = await c.read('pr:ttl');
    assert.equal('31' in value, false, 'gone once its TTL ran out');
  } finally {
    c.close();
  }
});
