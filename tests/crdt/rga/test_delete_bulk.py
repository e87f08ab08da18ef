"""rga: a bulk delete leaves what deleting range by range leaves.

:meth:`RunSeq.delete_ranges` deletes many ranges in one pass over the
blocks they touch (:meth:`RunSeq._delete_bulk`) and a few one range at a
time. Both are run on copies of the same seeded random documents (several
writers, inserts and deletes at random places, a merge of a diverged copy:
runs cut at random, blocks split, deleted runs next to deleted runs), with
ranges that cut runs, cover them whole, span runs and blocks, name deleted
elements again, overlap, the whole document, and none. They must leave the
same elements (id, visible or not, content, origin), state, view and ids,
the bulk pass at most as many runs, and a sequence whose caches (block
counts, length, id index, block sizes) agree with its runs; and the same
later inserts, deletes, deltas from elsewhere and merges must then give the
same deltas and the same elements.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from syncd.crdt.rga import Rga
from syncd.crdt.rga.sequence import BLOCK_MAX, INDEX_CHUNK, RUN_MAX, RunSeq
from tests.crdt.crdt_testlib import ctx

SEEDS = range(40)
"""Documents per shape; each seed gives the same document and ranges every run."""

Element = tuple[int, int, bool, Any, Any]
"""(client, counter, visible, content or None, origin) of one element."""


def _elements(seq: RunSeq) -> list[Element]:
    out: list[Element] = []
    for run in seq.runs():
        for k in range(run.n):
            origin = run.origin if k == 0 else (run.client, run.counter + k - 1)
            content = run.content[k] if run.vis else None
            out.append((run.client, run.counter + k, bool(run.vis), content, origin))
    return out


def _check_caches(seq: RunSeq) -> None:
    """The sequence's caches agree with its runs."""
    blocks = seq._blocks
    assert len(seq._bvis) == len(blocks)
    total = 0
    for bi, blk in enumerate(blocks):
        assert len(blk.runs) <= BLOCK_MAX
        assert blk.runs or len(blocks) == 1
        vis = 0
        for run in blk.runs:
            assert run.blk is blk
            assert run.n >= 1
            assert run.vis in (0, run.n)
            assert (run.content is None) == (run.vis == 0)
            if run.vis:
                assert len(run.content) == run.n <= RUN_MAX
            vis += run.vis
        assert seq._bvis[bi] == vis
        total += vis
    assert seq._len == total
    if seq._ids is not None:
        indexed = sorted((run.client, run.counter, id(run)) for e in seq._ids.values() for run in e)
        held = sorted((run.client, run.counter, id(run)) for run in seq.runs())
        assert indexed == held
        for entry in seq._ids.values():
            assert entry.firsts == [keys[0] for keys in entry.keys]
            for keys, runs in zip(entry.keys, entry.runs, strict=True):
                assert keys == [run.counter for run in runs]


def _document(rnd: random.Random, edits: int) -> Rga:
    """A document cut into many runs by ``edits`` random edits of four writers,
    then merged with a copy that went on by itself."""
    rga = Rga.new()
    _edit(rga, rnd, edits)
    other = rga.clone()
    _edit(other, rnd, edits // 4)
    _edit(rga, rnd, edits // 4)
    rga.merge(other)
    return rga


def _edit(rga: Rga, rnd: random.Random, edits: int) -> None:
    for _ in range(edits):
        length = rga.length
        client = rnd.randint(1, 4)
        if length and rnd.random() < 0.3:
            index = rnd.randrange(length)
            count = rnd.randint(1, min(6, length - index))
            rga.apply_op({"op": "delete", "index": index, "count": count}, ctx(client))
        else:
            index = rnd.choice([length, rnd.randint(0, length)])
            text = "".join(rnd.choice("abcdef") for _ in range(rnd.randint(1, 7)))
            rga.apply_op({"op": "insert", "index": index, "text": text}, ctx(client))


def _all_ids(seq: RunSeq) -> list[tuple[int, int]]:
    return [(run.client, run.counter + k) for run in seq.runs() for k in range(run.n)]


def _ranges(rnd: random.Random, seq: RunSeq, shape: str) -> list[list[int]]:
    """Ranges of existing ids (deleted ones included) of one shape."""
    ids = _all_ids(seq)
    if shape == "none":
        return []
    if shape == "all":
        return [[run.client, run.counter, run.n] for run in seq.runs()]
    if shape == "all-sorted":
        runs = sorted((run.client, run.counter, run.n) for run in seq.runs())
        return [list(r) for r in runs]
    if shape == "visible":
        return [[run.client, run.counter, run.n] for run in seq.runs() if run.vis]
    by_client: dict[int, list[int]] = {}
    for client, counter in ids:
        by_client.setdefault(client, []).append(counter)
    for counters in by_client.values():
        counters.sort()
    out: list[list[int]] = []
    pick = 1 if shape == "few" else rnd.randint(20, 200)
    for _ in range(pick):
        client = rnd.choice(sorted(by_client))
        counters = by_client[client]
        at = rnd.randrange(len(counters))
        # Consecutive counters of the client from there: within a run, or
        # across runs and blocks when the writer typed in several places.
        count = 1
        most = rnd.choice([1, 3, 12, 60])
        while (
            count < most
            and at + count < len(counters)
            and counters[at + count] == counters[at] + count
        ):
            count += 1
        out.append([client, counters[at], count])
    if shape == "sorted":
        out.sort()
    return out


def _pair(base: Rga, ranges: list[list[int]]) -> tuple[Rga, Rga]:
    one_by_one = base.clone()
    bulk = base.clone()
    # Both with the id index built, as a delete by ids finds it.
    one_by_one._seq.has(1, 1)
    bulk._seq.has(1, 1)
    one_by_one._seq.delete_ranges([list(r) for r in ranges], bulk=False)
    bulk._seq.delete_ranges([list(r) for r in ranges], bulk=True)
    return one_by_one, bulk


def _same(one_by_one: Rga, bulk: Rga) -> None:
    assert _elements(bulk._seq) == _elements(one_by_one._seq)
    assert bulk.state() == one_by_one.state()
    assert bulk.view(0) == one_by_one.view(0)
    assert bulk.ids() == one_by_one.ids()
    assert bulk.length == one_by_one.length
    _check_caches(bulk._seq)
    _check_caches(one_by_one._seq)


SHAPES = ["none", "few", "random", "sorted", "all", "all-sorted", "visible"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_bulk_delete_leaves_what_deleting_range_by_range_leaves(shape: str, seed: int) -> None:
    rnd = random.Random(f"{shape}-{seed}")
    base = _document(rnd, rnd.choice([40, 300]))
    ranges = _ranges(rnd, base._seq, shape)
    one_by_one, bulk = _pair(base, ranges)
    _same(one_by_one, bulk)
    assert bulk._seq.run_count() <= one_by_one._seq.run_count()
    if shape in ("all", "all-sorted"):
        assert bulk.length == 0

    # The same edits after it give the same deltas and the same elements.
    other = base.clone()
    _edit(other, rnd, 30)
    for rga in (one_by_one, bulk):
        rga.merge(other)
    _same(one_by_one, bulk)
    later = random.Random(seed)
    for step in range(40):
        kind = later.choice(["insert", "delete", "ids", "delta", "merge"])
        client = later.randint(1, 5)
        length = bulk.length
        if kind == "insert" or (kind in ("delete", "ids") and not length):
            index = later.randint(0, length)
            text = "xyz"[: later.randint(1, 3)]
            op = {"op": "insert", "index": index, "text": text}
        elif kind == "delete":
            index = later.randrange(length)
            op = {"op": "delete", "index": index, "count": later.randint(1, length - index)}
        elif kind == "ids":
            ids = bulk.ids()
            op = {"op": "delete", "ids": later.sample(ids, later.randint(1, len(ids)))}
        elif kind == "delta":
            delta = other.apply_op(
                {"op": "insert", "index": later.randint(0, other.length), "text": "q"},
                ctx(6 + step % 2),
            )
            one_by_one.apply_delta(delta)
            bulk.apply_delta(delta)
            _same(one_by_one, bulk)
            continue
        else:
            one_by_one.merge(other)
            bulk.merge(other)
            _same(one_by_one, bulk)
            continue
        assert bulk.apply_op(op, ctx(client)) == one_by_one.apply_op(op, ctx(client))
        _same(one_by_one, bulk)


def test_overlapping_and_repeated_ranges_delete_once() -> None:
    rnd = random.Random("overlap")
    base = _document(rnd, 300)
    runs = [(run.client, run.counter, run.n) for run in base._seq.runs()]
    ranges = [[c, k, n] for c, k, n in runs if n > 2][:40]
    # Each again, shifted into the next elements of its run, and repeated.
    ranges += [[c, k + 1, n - 1] for c, k, n in ranges] + ranges[:5]
    one_by_one, bulk = _pair(base, ranges)
    _same(one_by_one, bulk)


def test_a_fragmented_select_all_goes_through_the_index_once_per_block() -> None:
    """Two writers in turn, one element each: every run alone, every range
    one run; the delete of all of them by ids leaves the same as range by
    range, and what is typed after it lands the same."""
    rga = Rga.new()
    for i in range(3 * BLOCK_MAX * BLOCK_MAX):
        rga.apply_op({"op": "insert", "index": rga.length, "text": "ab"[i % 2]}, ctx(1 + i % 2))
    ranges = [[run.client, run.counter, run.n] for run in rga._seq.runs()]
    assert len(ranges) == rga._seq.run_count() == 3 * BLOCK_MAX * BLOCK_MAX
    one_by_one, bulk = _pair(rga, ranges)
    _same(one_by_one, bulk)
    assert bulk.length == 0
    for rga_ in (one_by_one, bulk):
        rga_.apply_op({"op": "insert", "index": 0, "text": "new"}, ctx(3))
    _same(one_by_one, bulk)


def test_the_op_takes_the_bulk_path_for_many_ranges_and_gives_the_same_delta() -> None:
    rnd = random.Random("op")
    base = _document(rnd, 300)
    ids = base.ids()
    by_op = base.clone()
    delta = by_op.apply_op({"op": "delete", "ids": ids}, ctx())
    one_by_one, _ = _pair(base, delta["ranges"])
    _same(one_by_one, by_op)
    assert by_op.length == 0


@pytest.mark.parametrize("seed", range(8))
def test_ranges_over_thousands_of_runs_of_one_writer(seed: int) -> None:
    """One writer typing backwards: consecutive counters, each its own run
    (its origin is the head), so that one range covers runs across chunks
    of the id index and across blocks, and may cut a run at either end."""
    rnd = random.Random(seed)
    rga = Rga.new()
    for _ in range(5 * INDEX_CHUNK):
        rga.apply_op({"op": "insert", "index": 0, "text": "ab"[: rnd.randint(1, 2)]}, ctx(1))
    top = rga._seq.clock
    ranges: list[list[int]] = []
    for _ in range(rnd.randint(1, 4)):
        first = rnd.randint(1, top)
        ranges.append([1, first, rnd.randint(1, top - first + 1)])
    one_by_one, bulk = _pair(rga, ranges)
    _same(one_by_one, bulk)
    for rga_ in (one_by_one, bulk):
        rga_.apply_op({"op": "insert", "index": rga_.length // 2, "text": "new"}, ctx(2))
    _same(one_by_one, bulk)


def test_a_select_all_takes_the_pass_and_a_few_ranges_do_not() -> None:
    """Which way :meth:`RunSeq.delete_ranges` goes (``bulk_pays``): a
    select-all of a document two writers typed in turn (a range per run,
    about 16 a block), and one range over the runs of a writer typing
    backwards, take the pass; a few ranges, or many thin among the blocks,
    go range by range."""
    rga = Rga.new()
    for i in range(4000):
        rga.apply_op({"op": "insert", "index": rga.length, "text": "x"}, ctx(1 + i % 2))
    seq = rga._seq
    ranges = [[run.client, run.counter, run.n] for run in seq.runs()]
    assert seq.bulk_pays(ranges)
    assert not seq.bulk_pays(ranges[:8])
    assert not seq.bulk_pays(ranges[::16])  # 1 a block
    assert not seq.bulk_pays([])
    backwards = Rga.new()
    for _ in range(2000):
        backwards.apply_op({"op": "insert", "index": 0, "text": "x"}, ctx(1))
    assert backwards._seq.bulk_pays([[1, 1, 2000]])
    assert not backwards._seq.bulk_pays([[1, 1, 20]])
