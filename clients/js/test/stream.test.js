import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { advance, classifyDelta, resumeFields, Subscription } from '../src/index.js';

const op = (seq, epoch = 'e1') => ({ kind: 'op', id: 'gc:a', type: 'gcounter', seq, epoch, op: { op: 'increment', client_id: 1, amount: 1, count: seq } });

describe('classifyDelta', () => {
  const cases = [
    [{ seq: 3, epoch: 'e1' }, op(4), 'apply'],
    [{ seq: 3, epoch: 'e1' }, op(3), 'duplicate'],
    [{ seq: 3, epoch: 'e1' }, op(1), 'duplicate'],
    [{ seq: 3, epoch: 'e1' }, op(6), 'gap'],
    [{ seq: 3, epoch: 'e1' }, op(1, 'e2'), 'first'],
    [{ seq: 3, epoch: 'e1' }, op(2, 'e2'), 'new_life'],
    [{ seq: 0, epoch: null }, op(1), 'first'],
    [{ seq: 0, epoch: null }, op(5), 'new_life'],
    [{ seq: 3, epoch: 'e1' }, { kind: 'snapshot', seq: 9, epoch: 'e1', state: null }, 'snapshot'],
    [{ seq: 3, epoch: 'e1' }, { kind: 'deleted', id: 'gc:a' }, 'deleted'],
  ];
  for (const [pos, delta, verdict] of cases) {
    test(`${JSON.stringify(pos)} + ${delta.kind} ${delta.seq ?? ''} ${delta.epoch ?? ''} -> ${verdict}`, () => {
      assert.equal(classifyDelta(pos, delta), verdict);
    });
  }

  test('bad deltas throw', () => {
    assert.throws(() => classifyDelta({ seq: 0, epoch: null }, { kind: 'nope' }), TypeError);
    assert.throws(() => classifyDelta({ seq: 0, epoch: null }, { kind: 'op', seq: 0 }), TypeError);
  });

  test('advance and resume fields', () => {
    const pos = advance({ seq: 3, epoch: 'e1' }, op(4), 'apply');
    assert.deepEqual(pos, { seq: 4, epoch: 'e1' });
    assert.deepEqual(resumeFields(pos), { since: 4, epoch: 'e1' });
    assert.deepEqual(resumeFields(advance(pos, { kind: 'deleted' }, 'deleted')), {});
    assert.deepEqual(resumeFields({ seq: 0, epoch: null }), {});
  });
});

describe('Subscription gap detection', () => {
  test('a seq jump asks for one resync from the last seq, then applies the replay', () => {
    const resyncs = [];
    const sub = new Subscription('gc:a', { resync: (s, fresh) => resyncs.push({ fresh, ...s.resumeFields() }) });
    sub.handleDelta({ kind: 'snapshot', id: 'gc:a', type: 'gcounter', seq: 1, epoch: 'e1', state: { counts: { 1: 1 } } });
    sub.handleDelta(op(2));
    sub.handleDelta(op(4)); // 3 is missing
    sub.handleDelta(op(5)); // still missing: no second resync
    assert.deepEqual(resyncs, [{ fresh: false, since: 2, epoch: 'e1' }]);
    assert.equal(sub.seq, 2);
    for (const seq of [3, 4, 5]) sub.handleDelta(op(seq)); // the replay
    assert.equal(sub.seq, 5);
    assert.equal(sub.value(), 5);
    sub.handleDelta(op(7));
    assert.equal(resyncs.length, 2, 'a later gap resyncs again');
  });

  test('an op of an unseen life past its start resyncs from scratch', () => {
    const resyncs = [];
    const sub = new Subscription('gc:a', { resync: (s, fresh) => resyncs.push(fresh) });
    sub.handleDelta({ kind: 'snapshot', id: 'gc:a', type: 'gcounter', seq: 2, epoch: 'e1', state: { counts: { 1: 2 } } });
    sub.handleDelta(op(2, 'e2'));
    assert.deepEqual(resyncs, [true]);
  });

  test('a new life starts from the empty state', () => {
    const sub = new Subscription('gc:a', { resync: () => assert.fail('no resync') });
    sub.handleDelta({ kind: 'snapshot', id: 'gc:a', type: 'gcounter', seq: 2, epoch: 'e1', state: { counts: { 1: 2 } } });
    sub.handleDelta({ kind: 'deleted', id: 'gc:a' });
    assert.equal(sub.value(), 0);
    sub.handleDelta({ ...op(1, 'e2'), op: { op: 'increment', client_id: 3, amount: 1, count: 1 } });
    assert.equal(sub.value(), 1);
    assert.equal(sub.epoch, 'e2');
  });
});
