// A gap (a delta missed) makes the subscription resubscribe from its last
// seq: it is behind until that start has arrived, so `synced` is false from
// the gap until the new start's `synced` message, which sets it (and emits
// `synced`) again, as for the start after a reconnect and as the Python
// client's is_synced. It stayed true through the resync.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Subscription } from '../src/index.js';

const op = (seq, epoch = 'e1') => ({ kind: 'op', id: 'gc:a', type: 'gcounter', seq, epoch, op: { op: 'increment', client_id: 1, amount: 1, count: seq } });
const synced = (seq, epoch = 'e1') => ({ kind: 'synced', ns: 'ns1', id: 'gc:a', seq, epoch });

test('synced is false from a gap until the resync start is in', () => {
  const sub = new Subscription('gc:a', { resync: () => {} });
  const events = [];
  sub.on('synced', () => events.push(sub.seq));
  sub.handleDelta({ kind: 'snapshot', id: 'gc:a', type: 'gcounter', seq: 1, epoch: 'e1', state: { counts: { 1: 1 } } });
  sub.handleSynced(synced(1));
  assert.equal(sub.synced, true);
  sub.handleDelta(op(2));
  sub.handleDelta(op(4)); // 3 is missing: resubscribed from 2
  assert.equal(sub.synced, false, 'behind while the resync runs');
  sub.handleDelta(op(5));
  assert.equal(sub.synced, false);
  for (const seq of [3, 4, 5]) sub.handleDelta(op(seq)); // the replay
  assert.equal(sub.synced, false, 'until the start ends');
  sub.handleSynced(synced(5));
  assert.equal(sub.synced, true);
  assert.deepEqual(events, [1, 5]);
});

test('an unseen life resyncs from scratch, not synced until its start is in', () => {
  const sub = new Subscription('gc:a', { resync: () => {} });
  sub.handleDelta({ kind: 'snapshot', id: 'gc:a', type: 'gcounter', seq: 2, epoch: 'e1', state: { counts: { 1: 2 } } });
  sub.handleSynced(synced(2));
  sub.handleDelta(op(3, 'e2'));
  assert.equal(sub.synced, false);
  sub.handleDelta({ kind: 'snapshot', id: 'gc:a', type: 'gcounter', seq: 3, epoch: 'e2', state: { counts: { 1: 3 } } });
  sub.handleSynced(synced(3, 'e2'));
  assert.equal(sub.synced, true);
});
