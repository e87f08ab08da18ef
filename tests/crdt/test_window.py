"""A revert's window (syncd/crdt/window.py): deltas decoded when first read,
kinds known without decoding, and the stable keys the history index keeps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from syncd.crdt.window import KEY_BITS, Window, kind_of, text_key


def test_a_key_is_the_same_in_every_process_and_never_zero() -> None:
    # Fixed values: the history index keeps keys in its hint file.
    assert text_key("delete") == 974290056
    assert text_key("agent:summarize-42") == 1064227653
    for text in ["", "insert", "a" * 128, "\ud800", "é"]:
        assert 1 <= text_key(text) < 1 << KEY_BITS
    assert kind_of({"op": "insert"}) == text_key("insert")
    assert kind_of({"ranges": []}) == kind_of("not a map") == kind_of({"op": 3}) == 0


def test_a_kind_is_the_key_of_its_op_name_however_often_and_in_any_mapping() -> None:
    """kind_of keeps op names' keys (a cache): the same keys, past its size too,
    and for a mapping that is not a dict."""
    from types import MappingProxyType

    from syncd.crdt.window import OP_KEYS_CACHED

    names = [f"op{i}" for i in range(OP_KEYS_CACHED * 2)] + ["insert", "\ud800", ""]
    for _ in range(2):
        assert [kind_of({"op": n}) for n in names] == [text_key(n) for n in names]
    assert kind_of(MappingProxyType({"op": "delete"})) == text_key("delete")


def test_a_window_decodes_each_delta_once_and_only_when_read() -> None:
    deltas = [{"op": "insert", "n": i} if i % 3 else {"op": "delete", "n": i} for i in range(6)]
    loaded: list[int] = []

    def load(i: int) -> Mapping[str, Any]:
        loaded.append(i)
        return deltas[i]

    marked = [i % 2 == 0 for i in range(6)]
    window = Window(marked, [kind_of(d) for d in deltas], load)
    assert len(window) == 6 and loaded == []
    assert [i for i in range(6) if window.may_be(i, "delete")] == [0, 3]
    assert window.delta(4) is deltas[4] and window[4] == (deltas[4], True)
    assert window[-1] == (deltas[5], False) and loaded == [4, 5]
    assert list(window) == list(zip(deltas, marked, strict=True))
    assert loaded == [4, 5, 0, 1, 2, 3]  # each once
    assert window[1:3] == [(deltas[1], False), (deltas[2], True)]
    with pytest.raises(IndexError):
        window[6]
    # A kind of 0 says nothing: the op may be of any kind.
    unknown = Window([False], [0], load)
    assert unknown.may_be(0, "delete") and unknown.may_be(0, "insert")
    with pytest.raises(ValueError, match="one mark and one kind"):
        Window([True], [], load)


def test_the_encodings_are_offered_when_the_store_has_them() -> None:
    window = Window([False, False], [0, 0], lambda i: {"op": "x", "i": i}, lambda: [b"a", b"b"])
    assert window.encodings() == [b"a", b"b"]
    assert Window([False], [0], lambda i: {"op": "x"}).encodings() is None
    assert Window.of([({"op": "x"}, False)]).encodings() is None


def test_steps_already_decoded_make_a_window_with_their_kinds() -> None:
    steps = [({"op": "insert"}, True), ({"op": "delete"}, False)]
    window = Window.of(steps)
    assert list(window) == steps
    assert window.kinds == [text_key("insert"), text_key("delete")]
    assert not window.may_be(0, "delete") and window.may_be(1, "delete")
    assert Window.of(window) is window
