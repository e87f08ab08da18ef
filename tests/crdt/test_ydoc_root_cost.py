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

from pycrdt import Doc, Text

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
