// The unmodified @hocuspocus/provider against syncd's Hocuspocus endpoint, on
// the same Yjs documents y-websocket providers use: edits converge both ways,
// updates are acknowledged (no unsynced changes left), a read-only token is
// told its scope and changes nothing, a bad token is refused per document.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as Y from 'yjs';
import WebSocket from 'ws';
import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider';
import { WebsocketProvider } from 'y-websocket';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const NS = 'hp';

describe('@hocuspocus/provider against syncd', { skip }, () => {
  let server;
  let token;
  const open = [];

  before(async () => {
    server = await startServer({ SERVICE_FSYNC: 'batch' });
    token = await server.token({ namespace: NS });
  });

  after(async () => {
    for (const p of open) p.destroy();
    // A document's awareness keeps a timer running until the document goes.
    for (const p of open) p.document?.destroy?.();
    for (const p of open) p.doc?.destroy?.();
    await server?.close();
  });

  function hocuspocus(name, doc, tok = token, events = {}) {
    const websocketProvider = new HocuspocusProviderWebsocket({
      url: `ws://127.0.0.1:${server.port}/v1/namespaces/${NS}/hocuspocus`,
      WebSocketPolyfill: WebSocket,
    });
    const provider = new HocuspocusProvider({ websocketProvider, name, document: doc, token: tok, ...events });
    provider.attach(); // a provider given its socket attaches itself to it
    open.push(provider, websocketProvider);
    return provider;
  }

  test('a Hocuspocus provider and a y-websocket provider edit one document', async () => {
    const a = new Y.Doc();
    const b = new Y.Doc();
    const hp = hocuspocus('shared', a);
    const yw = new WebsocketProvider(`ws://127.0.0.1:${server.port}/v1/namespaces/${NS}/yjs`, 'shared', b, {
      params: { token },
      disableBc: true,
      WebSocketPolyfill: WebSocket,
    });
    open.push(yw);
    await eventually(() => hp.isSynced && yw.synced, 5000, 'both synced');
    for (let i = 0; i < 20; i++) {
      a.getText('t').insert(0, 'h');
      b.getText('t').insert(b.getText('t').length, 'y');
    }
    await eventually(
      () => a.getText('t').toString() === b.getText('t').toString() && a.getText('t').length === 40,
      10000,
      'convergence',
    );
    // Every update acknowledged once durable: nothing left unsynced.
    await eventually(() => !hp.hasUnsyncedChanges, 5000, 'acknowledged');
    const r = await fetch(`${server.url}/v1/namespaces/${NS}/crdts/yd:shared?root=t`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal((await r.json()).value, a.getText('t').toString());
  });

  test('a read-only token is authenticated read-only and changes nothing', async () => {
    const readOnly = await server.token({ namespace: NS, clientId: 9, write: [] });
    const w = new Y.Doc();
    const r = new Y.Doc();
    const writer = hocuspocus('ro', w);
    let scope = null;
    const reader = hocuspocus('ro', r, readOnly, { onAuthenticated: (data) => (scope = data.scope) });
    await eventually(() => writer.isSynced && reader.isSynced, 5000, 'synced');
    assert.equal(scope, 'readonly');
    w.getText('t').insert(0, 'kept');
    await eventually(() => r.getText('t').toString() === 'kept', 5000, 'reader receives');
    r.getText('t').insert(0, 'forged ');
    await new Promise((res) => setTimeout(res, 300));
    assert.equal(w.getText('t').toString(), 'kept');
  });

  test('a bad token is refused for its document', async () => {
    let reason = null;
    hocuspocus('denied', new Y.Doc(), 'not-a-token', {
      onAuthenticationFailed: (data) => (reason = data.reason),
    });
    await eventually(() => reason !== null, 5000, 'authentication failed');
    assert.match(reason, /invalid_token/);
  });
});
