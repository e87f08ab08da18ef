"""The cost of reading one root of a Yjs document (``root_view``, the
service's ``?root=NAME&as=KIND`` read, and ``kinds_with_content``, which its
empty answers and the agent tools use) grows with the root's length, not its
square. pycrdt reads an array one index at a time, each from the start: a
text of 400,000 characters typed in 4,000 pieces took 7 s to read as an
array, four minutes at 2 MB, and working out which kinds show a root by
making each kind's view took as long; all of it held the event loop.

Measured in CPU time of this process, the shortest of a few runs, as a ratio
between a text and one SCALE times as long: linear work gives about SCALE,
the quadratic reads these tests were written against SCALE squared."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import pytest
from pycrdt import Array, Doc, Map, Text, XmlElement, XmlFragment, XmlText

from syncd.crdt import ydoc
from syncd.crdt.ydoc import kinds_with_content, root_view

SCALE: Final = 8
"""How much longer the long text is than the short one."""

LINEAR_AT_MOST: Final = 2 * SCALE
"""The most the long text's read may cost, in reads of the short one: twice
linear leaves a loaded machine room. Measured: the one-pass read 8.0 (0.083
and 0.661 s), the index-at-a-time read it replaced 27.7 (0.43 and 12.0 s)."""

PIECES: Final = 1000
"""Inserts the short text is typed in (one Yjs item each, 100 characters)."""


def _typed(pieces: int) -> bytes:
    """The update of a text typed in ``pieces`` inserts at both ends."""
    doc: Doc[Any] = Doc(client_id=6)
    text = doc.get("content", type=Text)
    for i in range(pieces):
        text.insert(len(text) if i % 2 else 0, "abcdefghij" * 10)
    return doc.get_update()


def _cost(read: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        read()
        best = min(best, time.process_time() - started)
    return best


def _ratio(read: Callable[[bytes], object]) -> float:
    short, long = _typed(PIECES), _typed(PIECES * SCALE)
    return _cost(lambda: read(long)) / max(_cost(lambda: read(short)), 1e-6)


def test_reading_a_text_as_an_array_is_linear() -> None:
    assert len(root_view(_typed(10), "content", "array")) == 1000
    ratio = _ratio(lambda update: root_view(update, "content", "array"))
    assert ratio < LINEAR_AT_MOST, ratio


def test_saying_which_kinds_show_a_text_is_linear() -> None:
    assert kinds_with_content(_typed(10), "content") == ["text", "array", "xml"]
    ratio = _ratio(lambda update: kinds_with_content(update, "content"))
    assert ratio < LINEAR_AT_MOST, ratio


def _nested(pieces: int) -> bytes:
    """The update of root map ``meta`` holding, at ``list``, an array of
    ``pieces`` inserts at both ends (one Yjs item each, ten values: numbers,
    strings, binary), and root array ``rows`` holding the same array."""
    doc: Doc[Any] = Doc(client_id=6)
    meta, rows = doc.get("meta", type=Map), doc.get("rows", type=Array)
    meta["list"], rows[0:0] = Array(), [Array()]
    for nested in (meta["list"], rows[0]):
        for i in range(pieces):
            nested[len(nested) if i % 2 else 0 : len(nested) if i % 2 else 0] = [
                i,
                "ab",
                b"\x01\x02",
                0.5,
                i,
                "cd",
                b"",
                -1,
                True,
                None,
            ]
    return doc.get_update()


def test_reading_an_array_held_in_a_map_or_an_array_is_linear() -> None:
    """An array inside a map or an array was read one index at a time, each
    from its start: 4,000 pieces took 0.08 s, about 1 MiB ~85 s."""
    short, long = _nested(PIECES), _nested(PIECES * SCALE)
    for root, kind in (("meta", "map"), ("rows", "array")):

        def read(update: bytes, root: str = root, kind: str = kind) -> object:
            return root_view(update, root, kind)

        ratio = _cost(lambda: read(long)) / max(_cost(lambda: read(short)), 1e-6)
        assert ratio < LINEAR_AT_MOST, (root, ratio)


def _held_content() -> bytes:
    """A map and an array each holding long arrays of every kind of content
    (numbers, strings, binary, empty binary, JSON lists and objects, a map, a
    text, XML, a subdocument, a long array of its own), some of it deleted,
    from two writers."""
    doc: Doc[Any] = Doc(client_id=6)
    other: Doc[Any] = Doc(client_id=7)
    meta, rows = doc.get("meta", type=Map), doc.get("rows", type=Array)
    meta["list"], rows[0:0] = Array(), [Array(), 5]
    for held in (meta["list"], rows[0]):
        for i in range(100):
            held.append([i, 0.5, "s", b"\x00\xff", b"", [1, 2], {"b": b"ab", "n": [3]}][i % 7])
        held.append(Map({"k": 1, "bin": b"\x01"}))
        held.append(Text("hello"))
        held.append(XmlFragment([XmlElement("p", {"a": "1"}, [XmlText("hi")])]))
        held.append(Doc(guid="sub"))
        held.append(Array([*range(80), b"\x02"]))
        del held[10:20]
        held.insert(5, float("nan"))
    other.apply_update(doc.get_update())
    other_rows = other.get("rows", type=Array)
    other_rows[0].insert(0, "from 7")
    other.get("meta", type=Map)["list"].insert(50, "from 7")
    doc.apply_update(other.get_update())
    doc.get("meta", type=Map)["list"][92]["k"] = 2  # an overwritten key (its map)
    return doc.get_update()


def test_arrays_held_in_others_read_in_one_pass_as_index_by_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one-pass read of an array held in another type (an undone
    deletion: ydoc._nested_items) gives what reading it index by index gives."""
    update = _held_content()
    fast = [root_view(update, "meta", "map"), root_view(update, "rows", "array")]
    assert len(fast[0]["list"]) > ydoc.INDEXED_ITEMS_AT_MOST
    monkeypatch.setattr(ydoc, "INDEXED_ITEMS_AT_MOST", 10**9)
    slow = [root_view(update, "meta", "map"), root_view(update, "rows", "array")]
    assert fast == slow
    assert "AP8=" in fast[1][0] and "" in fast[1][0] and [1, 2] in fast[1][0]
