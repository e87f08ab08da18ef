// An orset element reads in the form of its smallest live dot, whatever
// order the deltas came in (docs/data-model.md#orset), as the server's set
// (syncd/crdt/orset.py) does. Here JavaScript can see a form: -0 and 0 are one
// element (canonical JSON "0"), and the server keeps -0.0 as it was written.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { createReplica } from '../src/index.js';
import { PYTHON, serverMissing } from './helpers.js';

const REPO = fileURLToPath(new URL('../../..', import.meta.url));

function replica(deltas, state = null) {
  const r = createReplica('orset', state);
  for (const d of deltas) r.applyDelta(d);
  return r;
}

// The server made -0 (client 1), then 0 (client 2): the second add keeps the
// form the element read in, and says so.
const made = { op: 'add', element: -0, dot: [1, 1], dots: [] };
const again = { op: 'add', element: 0, dot: [2, 1], dots: [[1, 1]], form: -0 };

describe('ORSetReplica forms', () => {
  test('a re-add delivered first keeps the form the server shows', () => {
    for (const order of [[made, again], [again, made]]) {
      const [value] = replica(order).view().value;
      assert.ok(Object.is(value, -0), String(value));
    }
  });

  test('a record of an earlier server (no form) keeps the form in seq order', () => {
    const { form, ...old } = again;
    assert.ok(Object.is(replica([made, old]).view().value[0], -0));
  });

  test('concurrent adds read as the smallest dot; a remove of it shows the next', () => {
    const asZero = { op: 'add', element: 0, dot: [9, 1], dots: [] };
    const asMinus = { op: 'add', element: -0, dot: [4, 1], dots: [] };
    const gone = { op: 'remove', element: 0, dots: [[4, 1]] };
    for (const order of [[asZero, asMinus], [asMinus, asZero]]) {
      const r = replica(order);
      assert.ok(Object.is(r.view().value[0], -0));
      r.applyDelta(gone);
      assert.ok(Object.is(r.view().value[0], 0));
    }
    assert.ok(Object.is(replica([gone, asZero, asMinus]).view().value[0], 0));
  });

  test('a state with forms, and one written before them, load as the server reads them', () => {
    const state = { elements: [[-0, [[4, 1], [9, 1]]]], vv: { 4: 1, 9: 1 }, cloud: [], forms: [[9, 1, 0]] };
    const r = createReplica('orset', state);
    assert.ok(Object.is(r.view().value[0], -0));
    r.applyDelta({ op: 'remove', element: 0, dots: [[4, 1]] });
    assert.ok(Object.is(r.view().value[0], 0));
    // Before forms: every dot keeps the element's form; an identity held
    // twice (an older canonical JSON) reads in the first entry's form.
    const old = { elements: [[0, [[5, 1]]], [-0, [[2, 1]]]], vv: { 2: 1, 5: 1 }, cloud: [] };
    assert.ok(Object.is(createReplica('orset', old).view().value[0], 0));
  });
});

// Random histories at several writers of a cluster, made by the server's own
// set: the JavaScript replica reads what the Python one reads, in any order.
const SCRIPT = `
import json, random, sys
from syncd.crdt.base import OpContext
from syncd.crdt.orset import ORSet
FORMS = [-0.0, 0, [-0.0, 1], [0, 1], {"a": -0.0}, {"a": 0}, "x"]
out = []
for seed in range(40):
    rng = random.Random(seed)
    nodes = [ORSet.new() for _ in range(rng.randint(2, 3))]
    deltas = []
    for _ in range(rng.randint(1, 25)):
        at = rng.randrange(len(nodes))
        for d in rng.sample(deltas, min(len(deltas), rng.randint(0, 3))):
            nodes[at].apply_delta(d)
        op = {"op": rng.choice(["add", "add", "remove"]), "element": rng.choice(FORMS)}
        deltas.append(json.loads(json.dumps(nodes[at].apply_op(op, OpContext(10 * at + rng.randint(1, 2), 0, 1)))))
    full = ORSet.new()
    for d in deltas:
        full.apply_delta(d)
    out.append({"deltas": deltas, "state": full.state(), "view": full.view(0)})
json.dump(out, sys.stdout)
`;

describe('ORSetReplica against the server set', { skip: serverMissing() ?? false }, () => {
  test('random cluster histories read alike in any delivery order', () => {
    const cases = JSON.parse(execFileSync(PYTHON, ['-c', SCRIPT], { cwd: REPO, encoding: 'utf8' }));
    let rand = 7;
    const next = (n) => {
      rand = (rand * 1103515245 + 12345) % 2147483648;
      return rand % n;
    };
    for (const [i, { deltas, state, view }] of cases.entries()) {
      for (let k = 0; k < 4; k++) {
        const order = [...deltas];
        for (let j = order.length - 1; j > 0; j--) {
          const r = next(j + 1);
          [order[j], order[r]] = [order[r], order[j]];
        }
        assert.deepStrictEqual(replica(order).view(), view, `case ${i} order ${k}`);
      }
      assert.deepStrictEqual(createReplica('orset', state).view(), view, `case ${i} state`);
    }
  });
});
