// The unmodified y-websocket provider and yjs against syncd's Yjs endpoint:
// concurrent editing, offline edits merged on reconnect, a server restart, a
// read-only token, awareness, and a refused handshake.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import * as Y from 'yjs';
import { WebsocketProvider } from 'y-websocket';
import WebSocket from 'ws';
import { ADMIN, eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;
const NS = 'yjs';

function provider(server, room, doc, token, options = {}) {
  return new WebsocketProvider(`ws://127.0.0.1:${server.port}/v1/namespaces/${NS}/yjs`, room, doc, {
    params: { token },
    disableBc: true, // two providers in one process must talk through syncd, not a BroadcastChannel
    // What y-websocket's docs use in Node. (Node 20's built-in WebSocket does
    // not fire 'close' after a failed handshake, so the provider would never
    // retry after a restart.)
    WebSocketPolyfill: WebSocket,
    ...options,
  });
}

/** Destroy providers and their documents (a document's awareness keeps a timer running). */
function done(...providers) {
  for (const p of providers) {
    p.destroy();
    p.awareness.destroy();
    p.doc.destroy();
  }
}

function synced(p) {
  return p.synced ? Promise.resolve() : new Promise((resolve) => p.once('sync', (s) => s && resolve()));
}

describe('y-websocket against syncd', { skip }, () => {
  let server;
  let token;

  before(async () => {
    server = await startServer({ SERVICE_FSYNC: 'batch' });
    token = await server.token({ namespace: NS });
  });

  after(async () => {
    await server?.close();
  });

  test('two providers edit one document concurrently and end identical', async () => {
    const a = new Y.Doc();
    const b = new Y.Doc();
    const pa = provider(server, 'concurrent', a, token);
    const pb = provider(server, 'concurrent', b, token);
    await Promise.all([synced(pa), synced(pb)]);
    const ta = a.getText('content');
    const tb = b.getText('content');
    for (let i = 0; i < 50; i++) {
      ta.insert(0, 'a');
      tb.insert(tb.length, `b${i % 10}`);
    }
    await eventually(() => ta.toString() === tb.toString() && ta.length === 150, 10000, 'convergence');
    // syncd holds the same text, durably.
    const r = await fetch(`${server.url}/v1/namespaces/${NS}/crdts/yd:concurrent?root=content`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal((await r.json()).value, ta.toString());
    done(pa, pb);
  });

  test('offline edits merge on reconnect, and after a server restart', async () => {
    const a = new Y.Doc();
    const b = new Y.Doc();
    const pa = provider(server, 'offline', a, token);
    const pb = provider(server, 'offline', b, token);
    await Promise.all([synced(pa), synced(pb)]);
    a.getText('t').insert(0, 'shared ');
    await eventually(() => b.getText('t').toString() === 'shared ', 5000, 'first sync');
    pa.disconnect();
    a.getText('t').insert(7, 'from-a ');
    b.getText('t').insert(0, 'from-b ');
    await server.restart(); // every connection drops; the document is on disk
    pa.connect();
    await eventually(
      () => a.getText('t').toString() === b.getText('t').toString() && a.getText('t').length === 21,
      15000,
      'merge after reconnect',
    );
    assert.match(a.getText('t').toString(), /from-a/);
    assert.match(a.getText('t').toString(), /from-b/);
    done(pa, pb);
  });

  test('a read-only provider syncs but cannot change the document', async () => {
    const readOnly = await server.token({ namespace: NS, clientId: 9, write: [] });
    const w = new Y.Doc();
    const r = new Y.Doc();
    const pw = provider(server, 'readonly', w, token);
    const pr = provider(server, 'readonly', r, readOnly);
    await Promise.all([synced(pw), synced(pr)]);
    w.getText('t').insert(0, 'kept');
    await eventually(() => r.getText('t').toString() === 'kept', 5000, 'read-only receives');
    r.getText('t').insert(0, 'forged ');
    w.getText('t').insert(4, '!');
    await eventually(() => r.getText('t').toString().endsWith('kept!'), 5000, 'still receives');
    await new Promise((res) => setTimeout(res, 200));
    assert.equal(w.getText('t').toString(), 'kept!');
    const answer = await fetch(`${server.url}/v1/namespaces/${NS}/crdts/yd:readonly?root=t`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal((await answer.json()).value, 'kept!');
    done(pw, pr);
  });

  test('awareness reaches the other provider and leaves with the connection', async () => {
    const a = new Y.Doc();
    const b = new Y.Doc();
    const pa = provider(server, 'aware', a, token);
    const pb = provider(server, 'aware', b, token);
    await Promise.all([synced(pa), synced(pb)]);
    pa.awareness.setLocalStateField('user', { name: 'ada', color: '#f00' });
    await eventually(
      () => pb.awareness.getStates().get(a.clientID)?.user?.name === 'ada',
      5000,
      'awareness relayed',
    );
    pa.destroy(); // the connection goes: its cursor with it
    await eventually(() => !pb.awareness.getStates().has(a.clientID), 5000, 'awareness removed');
    done(pb);
    a.destroy();
  });

  test('a deleted document stays deleted: its providers are told and do not send it back', async () => {
    const a = new Y.Doc();
    const pa = provider(server, 'deleted', a, token);
    await synced(pa);
    const closes = [];
    pa.on('connection-close', (event) => closes.push(event?.code));
    const terminal = [];
    pa.on('closed', (event) => terminal.push(event));
    a.getText('t').insert(0, 'to be deleted');
    const url = `${server.url}/v1/namespaces/${NS}/crdts/yd:deleted`;
    const read = () => fetch(`${url}?root=t`, { headers: { authorization: `Bearer ${token}` } });
    await eventually(async () => (await (await read()).json()).value === 'to be deleted', 5000, 'written');
    const gone = await fetch(url, { method: 'DELETE', headers: { authorization: `Bearer ${ADMIN}` } });
    assert.equal(gone.status, 204);
    await eventually(() => closes.length > 0, 5000, 'the close');
    // A close code in y-websocket's 4400-4499 range: the provider does not reconnect.
    assert.deepEqual(closes, [4410]);
    assert.deepEqual(terminal, [{ code: 4410, reason: 'document deleted' }]);
    // Its first reconnects would have come after 0.2, 0.4 and 0.8 s, sending its copy back.
    await new Promise((res) => setTimeout(res, 1500));
    assert.equal(pa.wsconnected || pa.wsconnecting, false);
    assert.equal((await read()).status, 404);
    done(pa);
  });

  test('a bad token is refused at the handshake', async () => {
    const status = await new Promise((resolve, reject) => {
      const req = http.get(`${server.url}/v1/namespaces/${NS}/yjs/x?token=nope`, {
        headers: {
          connection: 'upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
        },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode);
      });
      req.on('upgrade', () => resolve(101));
      req.on('error', reject);
    });
    assert.equal(status, 401);
  });
});
