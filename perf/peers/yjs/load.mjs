// The load side of perf/studies/yjs.py: raw y-protocols clients (no Y.Doc per client,
// so a thousand fit in one process) against syncd's y-websocket or Hocuspocus
// endpoint, @y/websocket-server, or @hocuspocus/server.
//
//   node load.mjs trace  CONFIG_JSON   one writer sends a trace's updates open-loop
//                                      at a rate; N subscribers count deliveries
//   node load.mjs idle   CONFIG_JSON   N synced connections kept open until stdin closes
//
// CONFIG_JSON: {"protocol": "y-websocket"|"hocuspocus", "url": base URL,
// "token", "room", "subscribers", "updates": path of a JSON file with the
// base64 updates, "rate", "rooms"}. Prints one JSON line of figures.

import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import * as encoding from 'lib0/encoding';
import * as decoding from 'lib0/decoding';

const [mode, configText] = process.argv.slice(2);
const config = JSON.parse(configText);
const hocuspocus = config.protocol === 'hocuspocus';
const CONNECT_BATCH = 200;

function frame(room, build) {
  const e = encoding.createEncoder();
  if (hocuspocus) encoding.writeVarString(e, room);
  build(e);
  return encoding.toUint8Array(e);
}

const authMessage = (room) =>
  frame(room, (e) => {
    encoding.writeVarUint(e, 2);
    encoding.writeVarUint(e, 0);
    encoding.writeVarString(e, config.token ?? '');
    encoding.writeVarString(e, '3.4.4');
  });
const step1 = (room) =>
  frame(room, (e) => {
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint8Array(e, new Uint8Array([0]));
  });
const updateMessage = (room, update) =>
  frame(room, (e) => {
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint(e, 2);
    encoding.writeVarUint8Array(e, update);
  });
const emptyStep2 = (room) =>
  frame(room, (e) => {
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint(e, 1);
    encoding.writeVarUint8Array(e, new Uint8Array([0, 0]));
  });

function url(room) {
  if (hocuspocus) return config.url;
  const q = config.token ? `?token=${encodeURIComponent(config.token)}` : '';
  return `${config.url}/${room}${q}`;
}

/** A synced client: resolves once the server's step 2 arrived; counts updates after that. */
function client(room, onUpdate) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url(room), { perMessageDeflate: false });
    ws.binaryType = 'nodebuffer';
    let synced = false;
    ws.on('open', () => {
      if (hocuspocus) ws.send(authMessage(room));
      ws.send(step1(room));
    });
    ws.on('message', (data) => {
      const d = decoding.createDecoder(data);
      if (hocuspocus) decoding.readVarString(d);
      const type = decoding.readVarUint(d);
      if (type !== 0) return;
      const step = decoding.readVarUint(d);
      if (step === 0) {
        ws.send(emptyStep2(room)); // the server's step 1: we have nothing it lacks
      } else if (step === 1 && !synced) {
        synced = true;
        resolve(ws);
      } else if ((step === 2 || step === 1) && onUpdate) {
        onUpdate(performance.now());
      }
    });
    ws.on('error', reject);
    ws.on('close', () => { if (!synced) reject(new Error('closed before sync')); });
  });
}

async function connectAll(n, makeOne) {
  const out = [];
  for (let i = 0; i < n; i += CONNECT_BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + CONNECT_BATCH); j++) batch.push(makeOne(j));
    out.push(...(await Promise.all(batch)));
  }
  return out;
}

function percentile(sorted, q) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

if (mode === 'trace') {
  const updates = JSON.parse(readFileSync(config.updates, 'utf8')).map((u) => Buffer.from(u, 'base64'));
  const n = updates.length;
  const sent = new Float64Array(n);
  const latencies = [];
  let delivered = 0;
  let lastAt = 0;
  const counts = [];
  const subs = await connectAll(config.subscribers, (i) => {
    counts[i] = 0;
    return client(config.room, (at) => {
      const k = counts[i]++;
      if (k < n) latencies.push(at - sent[k]);
      delivered++;
      lastAt = at;
    });
  });
  const writer = await client(config.room, null);
  const messages = updates.map((u) => updateMessage(config.room, u));
  const started = performance.now();
  const interval = 1000 / config.rate;
  let k = 0;
  await new Promise((resolve) => {
    const tick = () => {
      const due = Math.min(n, Math.floor((performance.now() - started) / interval) + 1);
      while (k < due) {
        sent[k] = performance.now();
        writer.send(messages[k]);
        k++;
      }
      if (k < n) setTimeout(tick, 1);
      else resolve();
    };
    tick();
  });
  const sentAt = performance.now();
  const expected = n * config.subscribers;
  const deadline = sentAt + 30000;
  while (delivered < expected && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  latencies.sort((a, b) => a - b);
  const span = (lastAt - started) / 1000;
  console.log(JSON.stringify({
    updates: n,
    subscribers: config.subscribers,
    send_s: (sentAt - started) / 1000,
    sent_per_s: n / ((sentAt - started) / 1000),
    delivered,
    expected,
    complete: counts.every((c) => c === n),
    delivered_per_s: delivered / span,
    p50_ms: percentile(latencies, 0.5),
    p99_ms: percentile(latencies, 0.99),
  }));
  writer.terminate();
  for (const s of subs) s.terminate();
  process.exit(0);
} else if (mode === 'idle') {
  const rooms = config.rooms ?? 100;
  const conns = await connectAll(config.subscribers, (i) => client(`${config.room}${i % rooms}`, null));
  console.log(JSON.stringify({ connected: conns.length }));
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
} else {
  throw new Error(`unknown mode ${mode}`);
}
