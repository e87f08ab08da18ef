// A deleted document stays deleted with the real @hocuspocus/provider: the
// provider is sent the close message ("document deleted"), but it cannot be
// told to stop, and when its socket reconnects it authenticates and syncs
// again, its step 2 carrying its whole copy. The server remembers the
// deletion for a while (DELETED_DOC_MEMORY_S) and refuses that copy, with the
// close message again; a fresh Y.Doc on the same name creates the document.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as Y from 'yjs';
import WebSocket from 'ws';
import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const NS = 'hpdel';

describe('a deleted document and a stale @hocuspocus/provider', { skip }, () => {
  let server;
  let token;
  const open = [];

  before(async () => {
    server = await startServer({ SERVICE_FSYNC: 'batch' });
    token = await server.token({ namespace: NS });
  });

  after(async () => {
    for (const p of open) p.destroy();
    for (const p of open) p.document?.destroy?.();
    await server?.close();
  });

  function hocuspocus(name, doc, events = {}) {
    const websocketProvider = new HocuspocusProviderWebsocket({
      url: `ws://127.0.0.1:${server.port}/v1/namespaces/${NS}/hocuspocus`,
      WebSocketPolyfill: WebSocket,
    });
    const provider = new HocuspocusProvider({ websocketProvider, name, document: doc, token, ...events });
    provider.attach();
    open.push(provider, websocketProvider);
    return provider;
  }

  const url = `/v1/namespaces/${NS}/crdts/yd:deleted`;
  const read = () => fetch(`${server.url}${url}?root=t`, { headers: { authorization: `Bearer ${token}` } });

  test('its reconnect does not create it again; a fresh editor does', async () => {
    const stale = new Y.Doc();
    const closes = [];
    let authenticated = 0;
    const hp = hocuspocus('deleted', stale, {
      onClose: ({ event }) => closes.push(event?.reason),
      onAuthenticated: () => (authenticated += 1),
    });
    await eventually(() => hp.isSynced, 5000, 'synced');
    stale.getText('t').insert(0, 'to be deleted');
    await eventually(async () => (await (await read()).json()).value === 'to be deleted', 5000, 'written');
    const gone = await fetch(`${server.url}${url}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    assert.equal(gone.status, 204);
    await eventually(() => closes.includes('document deleted'), 5000, 'the close message');

    // The provider's socket drops and reconnects: it authenticates again and
    // sends its whole copy, which is refused.
    const before = authenticated;
    const refusedBefore = closes.filter((reason) => reason === 'document deleted').length;
    hp.configuration.websocketProvider.webSocket.close();
    await eventually(() => authenticated > before, 10000, 'authenticated again');
    await eventually(
      () => closes.filter((reason) => reason === 'document deleted').length > refusedBefore,
      5000,
      'its copy refused',
    );
    assert.equal((await read()).status, 404);
    hp.destroy();

    // A fresh editor (new client ids) creates the document.
    const fresh = new Y.Doc();
    const hf = hocuspocus('deleted', fresh);
    await eventually(() => hf.isSynced, 5000, 'fresh synced');
    fresh.getText('t').insert(0, 'fresh');
    await eventually(async () => (await (await read()).json()).value === 'fresh', 5000, 'created anew');
    await eventually(() => !hf.hasUnsyncedChanges, 5000, 'acknowledged');
  });
});
