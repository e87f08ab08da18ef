// The load side of perf/studies/join_storm.py: many fresh Yjs clients join one
// large document at once, against syncd's y-websocket or Hocuspocus endpoint,
// @y/websocket-server, or @hocuspocus/server.
//
//   node join.mjs CONFIG_JSON
//
// 1. Seed: one writer sends the seed updates (a JSON file of base64 updates),
//    then a probe joins until the document it is sent decodes to the expected
//    text. Prints {"seeded": bytes of the probe's step 2, "seed_s"}.
// 2. Waits for a line on stdin (the study reads the server's memory and CPU).
// 3. The storm: `joiners` connections open at once, each a fresh provider
//    (raw y-protocols: a step 1 with an empty state vector, an empty step 2 to
//    the server's step 1), and wait for the server's step 2 and what follows it.
//    Prints one JSON line: how many synced, when, and whether each got the
//    exact document (the payloads grouped by hash, one of each group decoded
//    with Yjs and compared with the expected text).
// 4. Exits when stdin closes.
//
// CONFIG_JSON: {"protocol": "y-websocket"|"hocuspocus", "url", "token", "room",
// "joiners", "updates": path, "expected": path of the expected text,
// "settle_ms": how long after its step 2 a joiner still counts updates,
// "hold_ms": how long each joiner reads nothing after its step 1}.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import WebSocket from 'ws';
import * as Y from 'yjs';
import * as encoding from 'lib0/encoding';
import * as decoding from 'lib0/decoding';

const config = JSON.parse(process.argv[2]);
const hocuspocus = config.protocol === 'hocuspocus';
const room = config.room;
const SEED_WINDOW = 64; // seed updates in flight before the writer waits for its socket to drain
const PROBE_TIMEOUT_MS = 120000;
const PROBE_SETTLE_MS = 200;
const STORM_TIMEOUT_MS = 300000;

function frame(build) {
  const e = encoding.createEncoder();
  if (hocuspocus) encoding.writeVarString(e, room);
  build(e);
  return encoding.toUint8Array(e);
}

const authMessage = () =>
  frame((e) => {
    encoding.writeVarUint(e, 2);
    encoding.writeVarUint(e, 0);
    encoding.writeVarString(e, config.token ?? '');
    encoding.writeVarString(e, '3.4.4');
  });
const step1 = () =>
  frame((e) => {
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint8Array(e, new Uint8Array([0]));
  });
const emptyStep2 = () =>
  frame((e) => {
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint(e, 1);
    encoding.writeVarUint8Array(e, new Uint8Array([0, 0]));
  });
const updateMessage = (update) =>
  frame((e) => {
    encoding.writeVarUint(e, 0);
    encoding.writeVarUint(e, 2);
    encoding.writeVarUint8Array(e, update);
  });

function url() {
  if (hocuspocus) return config.url;
  const q = config.token ? `?token=${encodeURIComponent(config.token)}` : '';
  return `${config.url}/${room}${q}`;
}

/** A fresh client. Resolves {ws, payloads, syncedAt} once the server's step 2
 * came; `payloads` keeps collecting the updates that follow it. With `holdMs`
 * it reads nothing for that long after its step 1, as a peer on a slow link. */
function join(holdMs = 0) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url(), { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
    ws.binaryType = 'nodebuffer';
    const state = { ws, payloads: [], syncedAt: 0 };
    ws.on('open', () => {
      if (hocuspocus) ws.send(authMessage());
      ws.send(step1());
      if (holdMs) {
        ws._socket.pause();
        setTimeout(() => ws._socket.resume(), holdMs);
      }
    });
    ws.on('message', (data) => {
      const d = decoding.createDecoder(data);
      if (hocuspocus) decoding.readVarString(d);
      if (decoding.readVarUint(d) !== 0) return;
      const step = decoding.readVarUint(d);
      if (step === 0) {
        ws.send(emptyStep2());
      } else if (step === 1 && !state.syncedAt) {
        state.payloads.push(decoding.readVarUint8Array(d));
        state.syncedAt = performance.now();
        resolve(state);
      } else if (state.syncedAt) {
        state.payloads.push(decoding.readVarUint8Array(d));
      }
    });
    ws.on('error', reject);
    ws.on('close', () => { if (!state.syncedAt) reject(new Error('closed before sync')); });
  });
}

function textOf(payloads) {
  const doc = new Y.Doc();
  for (const p of payloads) Y.applyUpdate(doc, p);
  const text = doc.getText('content').toString();
  doc.destroy();
  return text;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function seed(expected) {
  const updates = JSON.parse(readFileSync(config.updates, 'utf8')).map((u) => Buffer.from(u, 'base64'));
  const started = performance.now();
  const writer = await join();
  for (let i = 0; i < updates.length; i++) {
    writer.ws.send(updateMessage(updates[i]));
    if (i % SEED_WINDOW === 0) while (writer.ws.bufferedAmount > 0) await sleep(1);
  }
  const deadline = performance.now() + PROBE_TIMEOUT_MS;
  for (;;) {
    const probe = await join();
    await sleep(PROBE_SETTLE_MS); // what follows its step 2 (a catch-up) arrives
    const bytes = probe.payloads[0].length;
    // The step 2 alone must hold the document: a probe that joined while the
    // server was still applying the writer's updates gets part of it in its
    // step 2 and the rest as broadcasts, and its step 2 is then not the size
    // of the document the storm's joiners will be sent.
    const ok = textOf(probe.payloads.slice(0, 1)) === expected;
    probe.ws.terminate();
    if (ok) {
      // The writer stays: an in-memory server (Hocuspocus) unloads a document
      // nobody has open.
      return { writer, seeded: bytes, seed_s: (performance.now() - started) / 1000 };
    }
    if (performance.now() > deadline) throw new Error('the server never held the seeded document');
    await sleep(500);
  }
}

async function storm(expected) {
  const started = performance.now();
  const hold = config.hold_ms ?? 0;
  const settled = await Promise.allSettled(Array.from({ length: config.joiners }, () => join(hold)));
  const joined = settled.filter((s) => s.status === 'fulfilled').map((s) => s.value);
  const lastSync = Math.max(...joined.map((j) => j.syncedAt));
  await sleep(config.settle_ms ?? 500); // what follows a step 2 (a catch-up) arrives
  const groups = new Map();
  for (const j of joined) {
    const hash = createHash('sha1');
    for (const p of j.payloads) hash.update(p);
    const key = hash.digest('hex');
    if (!groups.has(key)) groups.set(key, { payloads: j.payloads, count: 0 });
    groups.get(key).count++;
  }
  let exact = 0;
  for (const g of groups.values()) if (textOf(g.payloads) === expected) exact += g.count;
  const times = joined.map((j) => j.syncedAt - started).sort((a, b) => a - b);
  const result = {
    joiners: config.joiners,
    synced: joined.length,
    exact,
    failed: settled.filter((s) => s.status === 'rejected').map((s) => String(s.reason)).slice(0, 3),
    distinct_payloads: groups.size,
    step2_bytes: joined.length ? joined[0].payloads[0].length : 0,
    first_s: times.length ? times[0] / 1000 : null,
    p50_s: times.length ? times[Math.floor(times.length / 2)] / 1000 : null,
    all_s: joined.length ? (lastSync - started) / 1000 : null,
  };
  return { result, joined };
}

const expected = readFileSync(config.expected, 'utf8');
const { writer, ...seeded } = await seed(expected);
console.log(JSON.stringify(seeded));
const lines = createInterface({ input: process.stdin });
const iterator = lines[Symbol.asyncIterator]();
await iterator.next(); // "go"
const { result, joined } = await Promise.race([
  storm(expected),
  sleep(STORM_TIMEOUT_MS).then(() => { throw new Error('storm timed out'); }),
]);
console.log(JSON.stringify(result));
await iterator.next(); // stdin closes
for (const j of joined) j.ws.terminate();
writer.ws.terminate();
process.exit(0);
