// The unmodified y-websocket (3.1) and @hocuspocus/provider against syncd
// when a token ends on an open connection (close 4401). y-websocket 3.1
// takes 4400-4499 as final: it does not reconnect and emits `closed`, so
// renewing `provider.params` on `connection-close` is not enough; what an app
// must do is set a new token in `closed` and call `provider.connect()`.
// Hocuspocus reconnects after any close and asks a token function again.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as Y from 'yjs';
import WebSocket from 'ws';
import { WebsocketProvider } from 'y-websocket';
import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const NS = 'yjs-end';
const TTL_MS = 1500; // ends within the test, outlives a connect and a sync

describe('Yjs providers across the end of their token', { skip }, () => {
  let server;
  const open = [];

  before(async () => {
    server = await startServer();
  });

  after(async () => {
    for (const p of open) p.destroy();
    for (const p of open) p.document?.destroy?.();
    await server?.close();
  });

  const shortToken = () => server.token({ namespace: NS, ttlMs: TTL_MS });

  async function served(room) {
    const r = await fetch(`${server.url}/v1/namespaces/${NS}/crdts/yd:${room}?root=t`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    return r.ok ? (await r.json()).value : null;
  }

  function yWebsocket(room, doc, token) {
    const p = new WebsocketProvider(`ws://127.0.0.1:${server.port}/v1/namespaces/${NS}/yjs`, room, doc, {
      params: { token },
      disableBc: true,
      WebSocketPolyfill: WebSocket,
    });
    open.push(p);
    return p;
  }

  test('y-websocket: renewing params on connection-close alone leaves it closed after 4401', async () => {
    const doc = new Y.Doc();
    const p = yWebsocket('params-only', doc, await shortToken());
    p.on('connection-close', async () => {
      p.params = { token: await shortToken() };
    });
    const closed = [];
    p.on('closed', (event) => closed.push(event));
    await eventually(() => p.synced, 5000, 'synced');
    await eventually(() => closed.length > 0, TTL_MS + 5000, 'the close at the token end');
    assert.deepEqual(closed, [{ code: 4401, reason: 'token expired' }]);
    await new Promise((r) => setTimeout(r, 1000)); // past the first reconnects' backoff
    assert.equal(p.wsconnected || p.wsconnecting, false);
  });

  test('y-websocket: a new token and connect() in `closed` carry edits past two token ends', async () => {
    const doc = new Y.Doc();
    const p = yWebsocket('renewed', doc, await shortToken());
    const codes = [];
    p.on('closed', async ({ code }) => {
      codes.push(code);
      if (code === 4401 || code === 4403) {
        p.params = { ...p.params, token: await shortToken() };
        p.connect();
      }
    });
    await eventually(() => p.synced, 5000, 'synced');
    for (const word of ['one', 'two']) {
      await new Promise((r) => setTimeout(r, TTL_MS + 300));
      doc.getText('t').insert(doc.getText('t').length, word);
      await eventually(async () => (await served('renewed'))?.includes(word), 5000, `${word} served`);
    }
    assert.deepEqual(codes, [4401, 4401]);
  });

  test('Hocuspocus: a token function is asked again after 4401 and edits go on', async () => {
    const doc = new Y.Doc();
    let asked = 0;
    const websocketProvider = new HocuspocusProviderWebsocket({
      url: `ws://127.0.0.1:${server.port}/v1/namespaces/${NS}/hocuspocus`,
      WebSocketPolyfill: WebSocket,
    });
    const provider = new HocuspocusProvider({
      websocketProvider,
      name: 'hp-renewed',
      document: doc,
      token: () => {
        asked += 1;
        return shortToken();
      },
    });
    provider.attach();
    open.push(provider, websocketProvider);
    await eventually(() => provider.isSynced, 5000, 'synced');
    for (const word of ['one', 'two']) {
      await new Promise((r) => setTimeout(r, TTL_MS + 300));
      doc.getText('t').insert(doc.getText('t').length, word);
      await eventually(async () => (await served('hp-renewed'))?.includes(word), 8000, `${word} served`);
    }
    assert.ok(asked >= 3, `token asked ${asked} times`);
  });
});
