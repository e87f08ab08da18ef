// What a subscription's replica hands out (`view()`, `value()`, and the
// deltas its `delta` and `change` listeners get) is the caller's to change:
// it held the replica's own objects (a register's value, a set's elements,
// a node's data), so a caller changing a returned object changed the
// replica, which then showed what the service never had.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SyncdClient } from '../src/index.js';
import { eventually, serverMissing, startServer } from './helpers.js';

const skip = serverMissing() ?? false;

const CASES = {
  'lw:doc': [{ op: 'set', value: { tags: ['a'] } }, { op: 'set', value: { meta: { n: 1 } } }],
  'or:set': [{ op: 'add', element: { k: [1] } }, { op: 'add', element: [2, { x: 3 }] }],
  'pr:room': [{ op: 'update', data: { at: [1] } }, { op: 'update', data: { cursor: [1, 2] } }],
  'rg:list': [{ op: 'insert', index: 0, values: [{ v: [1] }] }, { op: 'insert', index: 1, values: [[2]] }],
  'tr:tree': [{ op: 'add', id: 'a', data: { tags: ['x'] } }, { op: 'add', id: 'b', parent: 'a', data: { n: [1] } }],
};

/** Change every array and object inside `value` in place. */
function deface(value) {
  if (Array.isArray(value)) {
    for (const item of [...value]) deface(item);
    value.push('defaced');
  } else if (value && typeof value === 'object') {
    for (const item of Object.values(value)) deface(item);
    value.defaced = true;
  }
}

let server;
let client;
before(async () => {
  if (skip) return;
  server = await startServer({ SERVICE_RATE_LIMIT: '100000' });
  client = new SyncdClient({ baseUrl: server.url, token: await server.token({ clientId: 12 }), namespace: 'ns1' });
});
after(async () => {
  client?.close();
  await server?.close();
});

for (const [id, [first, ...later]] of Object.entries(CASES)) {
  test(`changing what the ${id} replica returns leaves it alone`, { skip }, async () => {
    await client.apply(id, first); // in the snapshot
    const sub = client.subscribe(id);
    await eventually(() => sub.synced, 5000, 'snapshot');
    sub.on('delta', (delta) => deface(delta));
    sub.on('change', (change) => deface(change.delta));
    for (const op of later) await client.apply(id, op);
    const { value: expected, seq } = await client.read(id);
    await eventually(() => sub.seq === seq, 5000, 'the ops');
    deface(sub.view());
    deface(sub.value());
    assert.deepEqual(sub.value(), expected);
  });
}
