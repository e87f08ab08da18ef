// After a reconnect the presence announce goes out with the resubscribes,
// in the same turn as the socket opens: before anything of the new
// connection is read, so it does not wait for a round trip of its own (an
// answer, an ack). The order of frames only: no clock. A real server,
// restarted; a WebSocket that notes what it sends and receives.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { decode } from '@msgpack/msgpack';
import { SyncdClient, ops } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
let server;
before(async () => {
  if (skip) return;
  server = await startServer();
});
after(() => server?.close());

/** A WebSocket noting, in order, each frame it sends and receives, by connection. */
function notingWebSocket(frames) {
  let connections = 0;
  return class extends WebSocket {
    constructor(url) {
      super(url);
      const connection = ++connections;
      this.addEventListener('message', (event) => {
        frames.push({ connection, dir: 'in', kind: decode(new Uint8Array(event.data)).kind });
      });
      this._connection = connection;
    }

    send(data) {
      const m = decode(new Uint8Array(data));
      frames.push({ connection: this._connection, dir: 'out', kind: m.kind, id: m.id, op: m.op?.op });
      super.send(data);
    }
  };
}

test('the presence announce goes out with the resubscribe, before any answer', { skip }, async () => {
  const token = await server.token({ clientId: 81 });
  const frames = [];
  const c = new SyncdClient(
    { baseUrl: server.url, token, namespace: 'ns1', WebSocket: notingWebSocket(frames) },
    { socket: { minReconnectMs: 20, maxReconnectMs: 200 } },
  );
  try {
    const sub = c.subscribe('pr:burst');
    await c.send('pr:burst', ops.updatePresence({ name: 'ann' }, { ttlMs: 60_000 }));
    await eventually(() => sub.synced, 10_000, 'subscribed');
    await server.restart();
    await eventually(() => c.socket.state === 'open' && c.socket.pendingOps === 0 && sub.synced, 20_000, 'back');
    // The connection that opened after the restart (attempts while it was down sent nothing).
    const last = Math.max(...frames.map((f) => f.connection));
    assert.ok(last > 1, 'reconnected');
    const second = frames.filter((f) => f.connection === last);
    const firstIn = second.findIndex((f) => f.dir === 'in');
    const subscribe = second.findIndex((f) => f.dir === 'out' && f.kind === 'subscribe' && f.id === 'pr:burst');
    const announce = second.findIndex((f) => f.dir === 'out' && f.kind === 'op' && f.id === 'pr:burst' && f.op === 'update');
    assert.ok(subscribe >= 0 && announce >= 0, JSON.stringify(second));
    assert.ok(firstIn < 0 || announce < firstIn, `the announce waited for an answer: ${JSON.stringify(second)}`);
    assert.ok(subscribe < announce);
  } finally {
    c.close();
  }
});
