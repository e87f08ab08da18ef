// The SSE event bound (MAX_EVENT_CHARS) leaves room for the largest
// snapshot the server sends at its default limits: a CRDT's state may reach
// SERVICE_MAX_CRDT_BYTES (64 MiB, syncd/quotas.py DEFAULT_MAX_CRDT_BYTES), a
// Yjs document by a sixteenth more, and its snapshot event is that state in
// base64, 4 characters per 3 bytes. The bound was 64 Mi characters, the
// limit's bytes: a 63 MiB orset, which the server held and served, made
// every stream of it end with `message_too_large` (its snapshot event was
// 88,346,138 characters), where a WebSocket subscription took it. Filling a
// CRDT to 64 MiB takes minutes, so the end-to-end case is a server with a
// small SERVICE_MAX_CRDT_BYTES and a bound in the same ratio.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { EventStream, MAX_EVENT_CHARS, SyncdClient } from '../src/index.js';
import { PYTHON, eventually, serverMissing, startServer, trackClientTimers } from './helpers.js';

const skip = serverMissing() ?? false;
const REPO = fileURLToPath(new URL('../../..', import.meta.url));

/** The server's SERVICE_MAX_CRDT_BYTES in the end-to-end case: a few ops fill it. */
const SMALL_LIMIT = 256 * 1024;
/** Characters of each element (a set element is at most 64 KiB as JSON). */
const ELEMENT_CHARS = 60_000;

let server;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_MAX_CRDT_BYTES: String(SMALL_LIMIT) });
});
after(() => server?.close());

/** The server's quota constants, read from its source. */
function serverQuotas() {
  const script =
    'import json; from syncd.quotas import DEFAULT_MAX_CRDT_BYTES as m, DELETION_HEADROOM_DIVISOR as d; ' +
    'print(json.dumps([m, d]))';
  const run = spawnSync(PYTHON, ['-c', script], { cwd: REPO, encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const [maxCrdtBytes, headroomDivisor] = JSON.parse(run.stdout);
  return { maxCrdtBytes, headroomDivisor };
}

/** The ratio of MAX_EVENT_CHARS to the server's default SERVICE_MAX_CRDT_BYTES. */
const CHARS_PER_LIMIT_BYTE = 2;

test("MAX_EVENT_CHARS holds a snapshot of a CRDT at the server's default limit, in base64", { skip }, () => {
  const { maxCrdtBytes, headroomDivisor } = serverQuotas();
  assert.equal(MAX_EVENT_CHARS, CHARS_PER_LIMIT_BYTE * maxCrdtBytes);
  const largestState = maxCrdtBytes * (1 + 1 / headroomDivisor);
  assert.ok(MAX_EVENT_CHARS > Math.ceil(largestState / 3) * 4, 'base64 of the largest state fits');
});

/** Add elements until the server refuses one more (413 crdt_too_large); the number added. */
async function fillToLimit(token, id) {
  for (let n = 0; ; n++) {
    const element = String(n).padStart(8, '0') + 'x'.repeat(ELEMENT_CHARS);
    const r = await fetch(`${server.url}/v1/namespaces/ns1/crdts/${id}/ops`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ op: 'add', type: 'orset', element }),
    });
    if (r.status === 413) {
      assert.equal((await r.json()).error, 'crdt_too_large');
      return n;
    }
    assert.equal(r.status, 200, await r.text());
  }
}

test('a CRDT at the server limit streams with a bound in that ratio, not with one of its bytes', { skip }, async () => {
  const token = await server.token({ clientId: 63 });
  const writer = new SyncdClient({ baseUrl: server.url, token, namespace: 'ns1' });
  const added = await fillToLimit(token, 'or:full');
  assert.ok(added >= 3, `${added} elements`);
  const timers = trackClientTimers();
  const open = (maxEventChars) =>
    new EventStream({ baseUrl: server.url, token, namespace: 'ns1' }, 'or:full', { transport: 'fetch', maxEventChars });
  const fits = open(CHARS_PER_LIMIT_BYTE * SMALL_LIMIT);
  const tooSmall = open(SMALL_LIMIT);
  const ends = [];
  tooSmall.subscription.on('close', (why) => ends.push(why.code));
  try {
    const errors = [];
    fits.on('error', (err) => errors.push(err.code));
    await eventually(() => fits.subscription.synced, 10000, 'synced');
    assert.equal(fits.subscription.value().length, added);
    assert.deepEqual(errors, []);
    // The old ratio, one character per byte of the limit: refused.
    await eventually(() => tooSmall.state === 'closed', 10000, 'the small bound ended its stream');
    assert.deepEqual(ends, ['message_too_large']);
  } finally {
    fits.close();
    tooSmall.close();
    writer.close();
    timers.restore();
  }
  assert.deepEqual(timers.pending(), [], 'no timer of the client is left');
});
