"""syncd.crdt.ydoc_nesting: the depth of an update's values, read without Yrs."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pycrdt import Array, Doc, Map, Text, XmlElement, XmlFragment, XmlText

from syncd.crdt import ydoc_nesting
from syncd.crdt.base import OpContext
from syncd.crdt.ydoc import YDoc
from syncd.crdt.ydoc_nesting import too_deep
from syncd.errors import ApiError


def _every_kind_of_content() -> bytes:
    doc: Doc[Any] = Doc(client_id=3)
    text = doc.get("t", type=Text)
    text.insert(0, "hello world")
    text.insert(5, " 😀 é")
    del text[0:2]
    text.format(0, 3, {"bold": True})
    text.insert_embed(1, {"image": "u"})
    values = doc.get("m", type=Map)
    for i, value in enumerate([1, 2.5, -3, 10**15, -2.5e300, "s", None, True, False, b"\x01"]):
        values[f"k{i}"] = value
    values["nested"] = {"a": [1, {"b": b"zz"}], "c": -5}
    values["doc"] = Doc()
    array = doc.get("a", type=Array)
    array.extend([1, "x", Map({"a": 1}), Array([1, 2]), Text("hi")])
    del array[0]
    element = doc.get("x", type=XmlFragment).children.append(XmlElement("p", {"class": "c"}))
    element.children.append(XmlText("hi")).insert_embed(1, {"img": "u"})
    return doc.get_update()


def test_an_update_of_every_kind_of_content_is_read_to_its_end() -> None:
    """The walk reads each struct as Yrs does: it ends where the delete set
    starts, and that reads to the update's last byte."""
    update = _every_kind_of_content()
    reader = ydoc_nesting._Reader(update)
    assert ydoc_nesting._structs_too_deep(reader, 3) is False  # {"a": [1, {…}]}: 3 levels
    for _ in range(reader.var_uint()):
        reader.var_uint()
        for _ in range(reader.var_uint()):
            reader.var_uint()
            reader.var_uint()
    assert reader.pos == len(update)
    assert ydoc_nesting._structs_too_deep(ydoc_nesting._Reader(update), 2) is True


@pytest.mark.parametrize("kind", ["array", "object"])
def test_a_value_as_deep_as_the_bound_passes_one_deeper_does_not(kind: str) -> None:
    def nested(levels: int) -> Any:
        value: Any = 1
        for _ in range(levels):
            value = [value, "s"] if kind == "array" else {"k": value, "z": 2.5}
        return value

    for levels in (7, 8):
        doc: Doc[Any] = Doc()
        doc.get("m", type=Map)["v"] = nested(levels)
        update = doc.get_update()
        assert ydoc_nesting._structs_too_deep(ydoc_nesting._Reader(update), 7) is (levels > 7)
        assert too_deep(update, 7) is (levels > 7)


def test_a_short_or_unreadable_update_is_not_too_deep() -> None:
    """Under two bytes a level it is not walked; what it cannot read, Yrs
    reads and refuses, as before."""
    assert too_deep(b"\x00\x00") is False
    assert too_deep(b"\x01" * (4 * ydoc_nesting.MAX_VALUE_DEPTH)) is False
    # Nine arrays in one another, past eight: nine tags, so walked.
    assert too_deep(b"\x01\x01\x04\x00\x28\x01\x01m\x01k\x01" + b"\x75\x01" * 9 + b"\x7e\x00", 8)


def _chain(parent: Any, levels: int) -> Any:
    for _ in range(levels):
        parent = parent.children.append(XmlElement("p"))
    return parent


def _op(update: bytes) -> dict[str, Any]:
    return {"op": "update", "update": base64.b64encode(update).decode()}


def test_type_nesting_is_bounded_across_updates_and_clients() -> None:
    """A type's depth comes from the document: a chain hung from an earlier
    update's type (its parent), or put after one of another client's items
    (its origin: the parent is the origin's), counts from there."""
    most = ydoc_nesting.MAX_TYPE_DEPTH
    doc: Doc[Any] = Doc(client_id=4)
    with doc.transaction():
        leaf = _chain(doc.get("x", type=XmlFragment), most - 10)
    first = doc.get_update()
    ydoc = YDoc()
    ydoc.apply_op(_op(first), OpContext(1, 0, 1))
    state = doc.get_state()
    with doc.transaction():
        _chain(leaf, 11)
    with pytest.raises(ApiError, match=str(most)):
        ydoc.apply_op(_op(doc.get_update(state)), OpContext(1, 0, 2))
    other: Doc[Any] = Doc(client_id=9)
    other.apply_update(first)
    state = other.get_state()
    node: Any = other.get("x", type=XmlFragment)
    for _ in range(most - 11):
        node = node.children[0]
    with other.transaction():
        sibling = node.children.append(XmlElement("q"))  # after client 4's element
        _chain(sibling, 11)
    with pytest.raises(ApiError, match=str(most)):
        ydoc.apply_op(_op(other.get_update(state)), OpContext(1, 0, 3))
    copy = ydoc.clone()  # the levels go with it, or come again from the document
    for each in (ydoc, copy, YDoc.from_state(ydoc.state())):
        each.apply_op(_op(_chain_update(first, 10)), OpContext(1, 0, 4))  # 4096: taken
        with pytest.raises(ApiError, match=str(most)):
            each.apply_op(_op(_chain_update(first, 11)), OpContext(1, 0, 5))


def _chain_update(first: bytes, levels: int) -> bytes:
    """An update putting ``levels`` elements under the deepest of ``first``'s."""
    doc: Doc[Any] = Doc(client_id=7)
    doc.apply_update(first)
    state = doc.get_state()
    node: Any = doc.get("x", type=XmlFragment)
    while len(node.children):
        node = node.children[0]
    with doc.transaction():
        _chain(node, levels)
    return doc.get_update(state)


def test_a_string_counts_its_clocks_in_utf16() -> None:
    """Yjs counts a string item's clocks in UTF-16 code units: an emoji two.
    Counted wrong, a later item's origin would miss and count from 0."""
    doc: Doc[Any] = Doc(client_id=3)
    doc.get("t", type=Text).insert(0, "a😀é")
    runs = ydoc_nesting.TypeDepths().deepest(doc.get_update()).runs
    assert runs == [(3, 0, 4, 0)]


def test_a_chain_sent_in_pieces_last_first_is_bounded_when_it_comes_in() -> None:
    """Pieces of a chain whose parent is not in the document yet wait (Yrs
    holds them as pending) and have no level yet: the update that lets
    them in, and so nests past the bound, is the one refused."""
    most = ydoc_nesting.MAX_TYPE_DEPTH
    doc: Doc[Any] = Doc(client_id=4)
    pieces = []
    node: Any = doc.get("x", type=XmlFragment)
    for _ in range(3):
        state = doc.get_state()
        with doc.transaction():
            node = _chain(node, most // 2)
        pieces.append(doc.get_update(state))
    ydoc = YDoc()
    for i, piece in enumerate(reversed(pieces[1:])):
        ydoc.apply_op(_op(piece), OpContext(1, 0, i + 1))  # they wait
    assert ydoc.pending_bytes() > 0
    waiting = ydoc._depths._waiting[:] if ydoc._depths is not None else None
    ydoc.apply_op(_op(pieces[2]), OpContext(1, 0, 3))  # sent again: waits once
    assert ydoc._depths is not None and ydoc._depths._waiting == waiting
    with pytest.raises(ApiError, match=str(most)):
        ydoc.apply_op(_op(pieces[0]), OpContext(1, 0, 4))
    assert not str(ydoc.doc.get("x", type=XmlFragment))  # nothing came in
