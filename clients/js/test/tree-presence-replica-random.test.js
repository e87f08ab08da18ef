// Tree and presence replicas kept by real deltas from random ops of three
// writers (many refused: unknown nodes, cycles) show what the server reads,
// every ten ops, from the start and from a late snapshot; a delete of
// a subtree uses the replica's children index, which must follow every op.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const IDS = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
const OPS = 150;

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function treeOp(r, i, known) {
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const kind = pick(['add', 'add', 'move', 'move', 'move', 'update', 'delete']);
  // Mostly nodes the replica holds (so most ops apply), some it does not.
  const some = () => (known.length && r() < 0.8 ? pick(known) : pick(IDS));
  const fresh = IDS.filter((n) => !known.includes(n));
  const op = { op: kind, id: kind === 'add' && fresh.length ? pick(fresh) : some() };
  if (kind === 'add' || kind === 'move') {
    op.parent = r() < 0.2 ? 'root' : some();
    if (r() < 0.5) op.pos = pick(['x', 'y', '😀', '\uE000']);
  }
  if (kind === 'add' || kind === 'update') op.data = { n: Math.floor(r() * 100) };
  return op;
}

function presenceOp(r, i) {
  if (r() < 0.25) return { op: 'leave' };
  return r() < 0.3 ? { op: 'update', ttl_ms: 300000 } : { op: 'update', data: { i }, ttl_ms: 300000 };
}

describe('random tree and presence ops against a real server', { skip: serverMissing() ?? false }, () => {
  let server;
  let writers;
  before(async () => {
    server = await startServer({ SERVICE_RATE_LIMIT: '100000' });
    writers = [];
    for (const clientId of [21, 22, 23]) {
      const token = await server.token({ clientId });
      writers.push(new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' }));
    }
  });
  after(async () => {
    for (const w of writers ?? []) w.close();
    await server?.close();
  });

  for (const [id, make] of [
    ['tr:random', treeOp],
    ['pr:random', presenceOp],
  ]) {
    test(id, async () => {
      const r = rng(7);
      const reader = new SyncdClient({ baseUrl: server.url, token: writers[0].config.token, namespace: 'ns1' });
      const sub = reader.subscribe(id);
      await eventually(() => sub.synced, 5000, 'snapshot');
      for (let i = 0; i < OPS; i++) {
        try {
          const known = [...(sub.replica?.nodes?.keys() ?? [])].filter((n) => n !== 'root');
          await writers[Math.floor(r() * writers.length)].apply(id, make(r, i, known));
        } catch (err) {
          if (![400, 409].includes(err.status)) throw err;
        }
        if (i % 10 === 9 || i === OPS - 1) {
          const read = await writers[0].read(id);
          if (!read) continue;
          await eventually(() => sub.seq === read.seq, 5000, `${id} seq ${read.seq}`);
          assert.deepEqual(sub.view().value, read.value, `${id} after op ${i}`);
        }
      }
      reader.close();
      // A replica from a late snapshot (the state as ?format=crdt shows it) agrees too.
      const other = new SyncdClient({ baseUrl: server.url, token: writers[0].config.token, namespace: 'ns1' });
      const lateSub = other.subscribe(id);
      const read = await writers[0].read(id);
      await eventually(() => lateSub.synced && lateSub.seq === read.seq, 5000, 'late snapshot');
      assert.deepEqual(lateSub.view().value, read.value);
      other.close();
    });
  }
});
