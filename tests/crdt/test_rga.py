"""The rga type: ops, validation, deltas, state, merge, and convergence.

A naive reference model (one list slot per element, classic RGA integration
element by element) checks the run-length structure: every op applied at a
server must give the same sequence as the model and as plain list splicing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import syncd.crdt.rga.sequence as seq_module
from syncd.crdt.base import OpContext
from syncd.crdt.rga import Rga
from syncd.crdt.rga.ids import MAX_ID_CHARS, IdRuns, parse_id, parse_ids, rle_ids
from syncd.crdt.rga.sequence import MAX_COUNTER
from syncd.errors import ApiError

EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "100"))
"""Hypothesis examples per property; raise it for a longer run."""

PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

Id = tuple[int, int]


def ctx(client: int = 1) -> OpContext:
    return OpContext(client_id=client, now_ms=0, seq=0)


def doc(text: str = "", client: int = 1) -> Rga:
    rga = Rga.new()
    if text:
        rga.apply_op({"op": "insert", "index": 0, "text": text}, ctx(client))
    return rga


def text_of(rga: Rga) -> str:
    text: str = rga.view(0)["text"]
    return text


def expand(ranges: list[list[int]]) -> list[Id]:
    return [(client, c) for client, first, n in ranges for c in range(first, first + n)]


def fmt(pair: Id) -> str:
    return f"{pair[1]}@{pair[0]}"


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tiny runs and blocks, so that small random documents split both."""
    monkeypatch.setattr(seq_module, "RUN_MAX", 3)
    monkeypatch.setattr(seq_module, "BLOCK_MAX", 4)
    yield


# -- the reference model -------------------------------------------------------


class Model:
    """Classic RGA, one slot per element: obviously right, and slow."""

    def __init__(self) -> None:
        self.els: list[list[Any]] = []  # [client, counter, value, deleted]

    def where(self, pair: Id) -> int:
        for i, el in enumerate(self.els):
            if (el[0], el[1]) == pair:
                return i
        raise KeyError(pair)

    def apply(self, delta: dict[str, Any]) -> None:
        if delta["op"] == "delete":
            for pair in expand(delta["ranges"]):
                self.els[self.where(pair)][3] = True
            return
        client, first = delta["client"], delta["counter"]
        items = list(delta["text"]) if "text" in delta else delta["values"]
        after = delta["after"]
        for k, value in enumerate(items):
            counter = first + k
            origin = (after[0], after[1]) if k == 0 and after is not None else None
            if k:
                origin = (client, counter - 1)
            pos = 0 if origin is None else self.where(origin) + 1
            while pos < len(self.els) and (self.els[pos][1], self.els[pos][0]) > (counter, client):
                pos += 1
            self.els.insert(pos, [client, counter, value, False])

    def values(self) -> list[Any]:
        return [el[2] for el in self.els if not el[3]]

    def ids(self) -> list[Id]:
        return [(el[0], el[1]) for el in self.els if not el[3]]

    def all_ids(self) -> list[Id]:
        return [(el[0], el[1]) for el in self.els]


# -- op generation ---------------------------------------------------------------

texts = st.text(alphabet="ab\U0001f600", min_size=1, max_size=5)
values = st.lists(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.text("xy", max_size=2)
    | st.just({"k": [1]}),
    min_size=1,
    max_size=4,
)


def draw_op(data: st.DataObject, model: Model) -> dict[str, Any]:
    length = len(model.ids())
    known = model.all_ids()
    kinds = ["insert_index", "insert_after"]
    if length:
        kinds += ["delete_index", "delete_index"]
    if known:
        kinds.append("delete_ids")
    kind = data.draw(st.sampled_from(kinds))
    if kind.startswith("insert"):
        op: dict[str, Any] = {"op": "insert"}
        if kind == "insert_index":
            op["index"] = data.draw(st.integers(0, length))
        else:
            after = data.draw(st.sampled_from([None, *known]))
            op["after"] = None if after is None else fmt(after)
        if data.draw(st.integers(0, 3)):
            op["text"] = data.draw(texts)
        else:
            op["values"] = data.draw(values)
        return op
    if kind == "delete_index":
        index = data.draw(st.integers(0, length - 1))
        count = data.draw(st.integers(1, min(4, length - index)))
        return {"op": "delete", "index": index, "count": count}
    picks = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=4))
    return {"op": "delete", "ids": [fmt(p) for p in picks]}


def apply_checked(server: Rga, model: Model, op: dict[str, Any], client: int) -> dict[str, Any]:
    """Apply ``op`` at the server and check it against the model and list splicing."""
    before_values = model.values()
    before_ids = model.ids()
    delta = server.apply_op(op, ctx(client))
    if op["op"] == "insert":
        items = list(op["text"]) if "text" in op else op["values"]
        first = delta["counter"]
        assert server.answer(delta) == {"ids": [f"{first + k}@{client}" for k in range(len(items))]}
        if "index" in op:
            index = op["index"]
            want_after = None if index == 0 else list(before_ids[index - 1])
            assert delta["after"] == want_after
        model.apply(delta)
        if "index" in op:
            assert model.values() == before_values[:index] + items + before_values[index:]
    else:
        assert server.answer(delta) == {}
        if "index" in op:
            index, count = op["index"], op.get("count", 1)
            assert sorted(expand(delta["ranges"])) == sorted(before_ids[index : index + count])
        else:
            wanted = {(int(i.split("@")[1]), int(i.split("@")[0])) for i in op["ids"]}
            assert sorted(expand(delta["ranges"])) == sorted(wanted)
        model.apply(delta)
    assert server.view(0)["value"] == model.values()
    assert server.ids() == [fmt(p) for p in model.ids()]
    assert server.length == len(model.ids())
    return delta


# -- validation ------------------------------------------------------------------

BAD_OPS: list[tuple[dict[str, Any], str]] = [
    ({"op": "insert", "text": "a"}, "index, after"),
    ({"op": "insert", "index": 0, "after": None, "text": "a"}, "index, after"),
    ({"op": "insert", "index": 0}, "text, values"),
    ({"op": "insert", "index": 0, "text": "a", "values": [1]}, "text, values"),
    ({"op": "insert", "index": 0, "text": ""}, "text:"),
    ({"op": "insert", "index": 0, "text": 5}, "text:"),
    ({"op": "insert", "index": 0, "text": "\ud800"}, "text:"),
    ({"op": "insert", "index": 0, "values": []}, "values:"),
    ({"op": "insert", "index": 0, "values": "ab"}, "values:"),
    ({"op": "insert", "index": 0, "values": [b"x"]}, "values:"),
    ({"op": "insert", "index": 0, "values": [float("nan")]}, "values:"),
    ({"op": "insert", "index": 0, "values": [{1: 2}]}, "values:"),
    ({"op": "insert", "index": -1, "text": "a"}, "index:"),
    ({"op": "insert", "index": 4, "text": "a"}, "index:"),
    ({"op": "insert", "index": True, "text": "a"}, "index:"),
    ({"op": "insert", "index": 1.0, "text": "a"}, "index:"),
    ({"op": "insert", "index": None, "text": "a"}, "index:"),
    ({"op": "insert", "after": "nope", "text": "a"}, "after:"),
    ({"op": "insert", "after": "99@1", "text": "a"}, "after:"),
    ({"op": "insert", "after": "01@1", "text": "a"}, "after:"),
    ({"op": "insert", "after": "0@1", "text": "a"}, "after:"),
    ({"op": "insert", "after": "1@", "text": "a"}, "after:"),
    ({"op": "insert", "after": 5, "text": "a"}, "after:"),
    ({"op": "insert", "after": "1" * MAX_ID_CHARS + "@1", "text": "a"}, "after:"),
    ({"op": "delete"}, "index, ids"),
    ({"op": "delete", "index": 0, "ids": ["1@1"]}, "index, ids"),
    ({"op": "delete", "index": 0, "count": 0}, "count:"),
    ({"op": "delete", "index": 0, "count": True}, "count:"),
    ({"op": "delete", "index": 0, "count": "1"}, "count:"),
    ({"op": "delete", "index": 2, "count": 2}, "index, count"),
    ({"op": "delete", "index": 3}, "index, count"),
    ({"op": "delete", "index": -1}, "index:"),
    ({"op": "delete", "index": "0"}, "index:"),
    ({"op": "delete", "ids": []}, "ids:"),
    ({"op": "delete", "ids": "1@1"}, "ids:"),
    ({"op": "delete", "ids": ["1@1", "7@9"]}, "ids:"),
    ({"op": "delete", "ids": ["x"]}, "ids:"),
    ({"op": "delete", "ids": [17]}, "ids:"),
    ({"op": "delete", "ids": ["1@1"], "count": 1}, "count:"),
    ({"op": "move", "index": 0}, "op:"),
    ({"index": 0, "text": "a"}, "op:"),
]


@pytest.mark.parametrize(("op", "field"), BAD_OPS)
def test_bad_ops_are_refused_naming_the_field(op: dict[str, Any], field: str) -> None:
    rga = doc("abc")
    before = rga.state()
    with pytest.raises(ApiError) as info:
        rga.apply_op(op, ctx())
    assert info.value.status == 400
    assert info.value.code == "invalid_op"
    assert info.value.message.startswith(field)
    assert rga.state() == before
    assert text_of(rga) == "abc"


# The cursor after "abc" is index 3: ops shaped like typing there take the fast
# path, which must refuse exactly what the general path refuses.
HOT_BAD_OPS: list[tuple[dict[str, Any], str]] = [
    ({"op": "insert", "index": 3, "text": ""}, "text:"),
    ({"op": "insert", "index": 3, "text": "\ud800"}, "text:"),
    ({"op": "insert", "index": 3, "text": "x", "after": None}, "index, after"),
    ({"op": "insert", "index": 3, "text": "x", "values": [1]}, "text, values"),
    ({"op": "insert", "index": 3, "values": "x"}, "values:"),
    ({"op": "delete", "index": 2, "count": True}, "count:"),
    ({"op": "delete", "index": 2, "count": 1.0}, "count:"),
    ({"op": "delete", "index": 2, "ids": ["1@1"]}, "index, ids"),
]


@pytest.mark.parametrize(("op", "field"), HOT_BAD_OPS)
def test_bad_ops_at_the_cursor_are_refused_too(op: dict[str, Any], field: str) -> None:
    rga = doc("abc")
    before = rga.state()
    with pytest.raises(ApiError) as info:
        rga.apply_op(op, ctx())
    assert info.value.message.startswith(field)
    assert rga.state() == before
    # The cursor still works after the refusal.
    rga.apply_op({"op": "insert", "index": 3, "text": "d"}, ctx())
    rga.apply_op({"op": "delete", "index": 3}, ctx())
    rga.apply_op({"op": "insert", "index": 3, "text": "e"}, ctx())
    assert text_of(rga) == "abce"


def test_the_counter_limit_refuses_an_insert_past_it() -> None:
    near = MAX_COUNTER - 2
    rga = Rga.from_state({"runs": [[1, near, None, "a"]]})
    rga.apply_op({"op": "insert", "index": 1, "text": "bc"}, ctx())  # exactly up to the limit
    assert text_of(rga) == "abc"
    with pytest.raises(ApiError) as info:
        rga.apply_op({"op": "insert", "index": 3, "text": "d"}, ctx())
    assert info.value.message.startswith("text:")
    with pytest.raises(ApiError) as info:
        rga.apply_op({"op": "insert", "index": 0, "values": [1]}, ctx())
    assert info.value.message.startswith("values:")
    assert text_of(rga) == "abc"


def test_an_id_of_the_longest_accepted_length_is_parsed() -> None:
    rga = doc("a")
    longest = "1" * (MAX_ID_CHARS - 2) + "@1"
    with pytest.raises(ApiError) as info:
        rga.apply_op({"op": "insert", "after": longest, "text": "x"}, ctx())
    assert "unknown element id" in info.value.message


# -- inserts -----------------------------------------------------------------------


def test_index_inserts_put_elements_before_the_element_at_index() -> None:
    rga = doc("ac")
    rga.apply_op({"op": "insert", "index": 1, "text": "b"}, ctx())
    rga.apply_op({"op": "insert", "index": 0, "text": ">"}, ctx())
    rga.apply_op({"op": "insert", "index": 4, "text": "<"}, ctx())
    assert text_of(rga) == ">abc<"
    assert rga.length == 5


def test_text_is_one_element_per_character_astral_ones_included() -> None:
    rga = doc("a\U0001f600b")
    assert rga.view(0) == {"value": ["a", "\U0001f600", "b"], "text": "a\U0001f600b"}
    rga.apply_op({"op": "delete", "index": 1}, ctx())
    assert text_of(rga) == "ab"


def test_values_hold_any_json_and_text_appears_only_for_strings() -> None:
    rga = Rga.new()
    rga.apply_op({"op": "insert", "index": 0, "values": [1, {"a": [None]}, "x"]}, ctx())
    assert rga.view(0) == {"value": [1, {"a": [None]}, "x"]}
    rga.apply_op({"op": "delete", "index": 0, "count": 2}, ctx())
    assert rga.view(0) == {"value": ["x"], "text": "x"}
    rga.apply_op({"op": "insert", "index": 1, "values": ["yz"]}, ctx())
    rga.apply_op({"op": "insert", "index": 0, "text": "w"}, ctx())
    assert rga.view(0) == {"value": ["w", "x", "yz"], "text": "wxyz"}


def test_an_empty_document_views_as_empty_text() -> None:
    assert Rga.new().view(0) == {"value": [], "text": ""}


def test_the_insert_answer_lists_the_new_ids_in_order() -> None:
    rga = Rga.new()
    first = rga.apply_op({"op": "insert", "index": 0, "text": "ab"}, ctx(7))
    assert rga.answer(first) == {"ids": ["1@7", "2@7"]}
    second = rga.apply_op({"op": "insert", "index": 1, "values": [1, 2, 3]}, ctx(3))
    assert rga.answer(second) == {"ids": ["3@3", "4@3", "5@3"]}
    assert rga.ids() == ["1@7", "3@3", "4@3", "5@3", "2@7"]
    assert rga.answer(rga.apply_op({"op": "delete", "index": 0}, ctx())) == {}


def test_after_inserts_go_right_after_the_named_element() -> None:
    rga = doc("abc")  # ids 1@1 2@1 3@1
    rga.apply_op({"op": "insert", "after": "1@1", "text": "x"}, ctx(2))
    assert text_of(rga) == "axbc"
    rga.apply_op({"op": "insert", "after": None, "text": "^"}, ctx(2))
    assert text_of(rga) == "^axbc"
    rga.apply_op({"op": "delete", "ids": ["3@1"]}, ctx())
    rga.apply_op({"op": "insert", "after": "3@1", "text": "$"}, ctx(2))  # after a tombstone
    assert text_of(rga) == "^axb$"
    rga.apply_op({"op": "insert", "after": "2@1", "text": "y"}, ctx(2))
    assert text_of(rga) == "^axby$"


def test_the_delta_carries_the_origin_and_first_id() -> None:
    rga = doc("ab", client=4)
    delta = rga.apply_op({"op": "insert", "index": 1, "text": "xy"}, ctx(9))
    assert delta == {"op": "insert", "after": [4, 1], "client": 9, "counter": 3, "text": "xy"}
    delta = rga.apply_op({"op": "insert", "index": 0, "values": [True]}, ctx(9))
    assert delta == {"op": "insert", "after": None, "client": 9, "counter": 5, "values": [True]}


def test_typing_past_the_run_limit_keeps_text_and_state_compact() -> None:
    rga = Rga.new()
    total = seq_module.RUN_MAX * 3 + 7
    for i in range(total):
        rga.apply_op({"op": "insert", "index": i, "text": "x"}, ctx())
    assert text_of(rga) == "x" * total
    assert max(run.n for run in rga._seq.runs()) <= seq_module.RUN_MAX
    # One chain of typing is one run in the state, however it is split inside.
    assert rga.state() == {"runs": [[1, 1, None, "x" * total]]}


def test_many_runs_split_blocks_and_stay_in_order() -> None:
    rga = Rga.new()
    count = seq_module.BLOCK_MAX * 5
    for i in range(count):
        # Inserting at the front makes every element its own run.
        rga.apply_op({"op": "insert", "index": 0, "text": chr(0x4E00 + i)}, ctx())
    sizes = rga._seq.runs_per_block()
    assert len(sizes) > 1
    assert all(size <= seq_module.BLOCK_MAX for size in sizes)
    assert text_of(rga) == "".join(chr(0x4E00 + i) for i in reversed(range(count)))
    rga.apply_op({"op": "delete", "index": 1, "count": count - 2}, ctx())
    assert rga.length == 2


# -- deletes -----------------------------------------------------------------------


def test_delete_by_index_and_count_defaults_to_one() -> None:
    rga = doc("abcdef")
    rga.apply_op({"op": "delete", "index": 1, "count": 2}, ctx())
    assert text_of(rga) == "adef"
    rga.apply_op({"op": "delete", "index": 3}, ctx())
    assert text_of(rga) == "ade"


def test_delete_by_ids_accepts_deleted_ids_again() -> None:
    rga = doc("abcd")
    delta = rga.apply_op({"op": "delete", "ids": ["2@1", "4@1", "3@1"]}, ctx())
    assert delta == {"op": "delete", "ranges": [[1, 2, 3]]}
    assert text_of(rga) == "a"
    again = rga.apply_op({"op": "delete", "ids": ["3@1", "1@1"]}, ctx())
    assert again == {"op": "delete", "ranges": [[1, 1, 1], [1, 3, 1]]}
    assert text_of(rga) == ""


def test_deleting_ten_thousand_characters_is_one_range() -> None:
    rga = doc("z" * 10_000)
    delta = rga.apply_op({"op": "delete", "index": 0, "count": 10_000}, ctx())
    assert delta == {"op": "delete", "ranges": [[1, 1, 10_000]]}
    assert rga.state() == {"runs": [[1, 1, None, 10_000]]}


def test_backspace_joins_the_deleted_run() -> None:
    rga = Rga.new()
    for i, ch in enumerate("hello"):
        rga.apply_op({"op": "insert", "index": i, "text": ch}, ctx())
    for i in (4, 3, 2):
        assert rga.apply_op({"op": "delete", "index": i}, ctx()) == {
            "op": "delete",
            "ranges": [[1, i + 1, 1]],
        }
    assert text_of(rga) == "he"
    assert rga.state() == {"runs": [[1, 1, None, "he"], [1, 3, [1, 2], 3]]}
    rga.apply_op({"op": "insert", "index": 2, "text": "y"}, ctx())
    assert text_of(rga) == "hey"
    assert rga.state()["runs"][1] == [1, 6, [1, 2], "y"]


def test_deleting_the_end_of_the_typed_run_keeps_ids_findable() -> None:
    rga = Rga.new()
    # A delete by ids builds the id index, which the cursor paths keep up to date.
    rga.apply_op({"op": "insert", "index": 0, "text": "#"}, ctx())
    rga.apply_op({"op": "delete", "ids": ["1@1"]}, ctx())
    for i, ch in enumerate("hello world"):
        rga.apply_op({"op": "insert", "index": i, "text": ch}, ctx())
    # "hello world" is 2@1 .. 12@1; deleting "rld" then "o w" joins one deleted run.
    assert rga.apply_op({"op": "delete", "index": 8, "count": 3}, ctx()) == {
        "op": "delete",
        "ranges": [[1, 10, 3]],
    }
    assert rga.apply_op({"op": "delete", "index": 4, "count": 4}, ctx()) == {
        "op": "delete",
        "ranges": [[1, 6, 4]],
    }
    assert text_of(rga) == "hell"
    # The first typed element went before the deleted "#": a newer head comes first.
    assert rga.state() == {"runs": [[1, 2, None, "hell"], [1, 6, [1, 5], 7], [1, 1, None, 1]]}
    again = rga.apply_op({"op": "delete", "ids": ["6@1", "12@1"]}, ctx())
    assert again == {"op": "delete", "ranges": [[1, 6, 1], [1, 12, 1]]}
    rga.apply_op({"op": "insert", "after": "9@1", "text": "!"}, ctx(2))
    assert text_of(rga) == "hell!"
    rga.apply_op({"op": "insert", "index": 4, "text": "o"}, ctx())
    assert text_of(rga) == "hello!"


# -- concurrency ---------------------------------------------------------------------


def test_concurrent_inserts_order_by_higher_client_on_equal_counters() -> None:
    base = doc("ab")  # 1@1 2@1
    left, right = base.clone(), base.clone()
    dl = left.apply_op({"op": "insert", "after": "1@1", "text": "x"}, ctx(2))
    dr = right.apply_op({"op": "insert", "after": "1@1", "text": "y"}, ctx(3))
    assert dl["counter"] == dr["counter"] == 3
    left.apply_delta(dr)
    right.apply_delta(dl)
    assert text_of(left) == text_of(right) == "ayxb"


def test_concurrent_inserts_order_by_higher_counter_first() -> None:
    base = doc("ab")  # 1@1 2@1
    left, right = base.clone(), base.clone()
    dp = left.apply_op({"op": "insert", "after": "1@1", "text": "p"}, ctx(9))
    dbang = right.apply_op({"op": "insert", "index": 2, "text": "!"}, ctx(2))
    dq = right.apply_op({"op": "insert", "after": "1@1", "text": "q"}, ctx(2))
    assert (dp["counter"], dbang["counter"], dq["counter"]) == (3, 3, 4)
    left.apply_delta(dbang)
    left.apply_delta(dq)
    right.apply_delta(dp)
    # q (counter 4) comes before p (counter 3) although client 9 > client 2.
    assert text_of(left) == text_of(right) == "aqpb!"
    assert left.state() == right.state()


def test_inserts_after_a_concurrently_deleted_element_survive() -> None:
    base = doc("abc")
    left, right = base.clone(), base.clone()
    dl = left.apply_op({"op": "delete", "ids": ["2@1"]}, ctx(1))
    dr = right.apply_op({"op": "insert", "after": "2@1", "text": "X"}, ctx(2))
    left.apply_delta(dr)
    right.apply_delta(dl)
    assert text_of(left) == text_of(right) == "aXc"
    assert left.state() == right.state()


def test_apply_delta_is_idempotent() -> None:
    server = doc("abc")
    replica = server.clone()
    deltas = [
        server.apply_op({"op": "insert", "index": 1, "text": "xy"}, ctx(2)),
        server.apply_op({"op": "delete", "index": 0, "count": 2}, ctx(2)),
    ]
    for delta in deltas + deltas + deltas[::-1]:
        replica.apply_delta(delta)
    assert replica.state() == server.state()


@pytest.mark.parametrize(
    "delta",
    [
        {"op": "insert", "after": [1, 99], "client": 2, "counter": 5, "text": "x"},
        {"op": "insert", "after": None, "client": 2, "counter": 0, "text": "x"},
        {"op": "insert", "after": None, "client": "2", "counter": 5, "text": "x"},
        {"op": "insert", "after": None, "client": 2, "counter": 5, "text": ""},
        {"op": "insert", "after": None, "client": 2, "counter": 5, "values": "x"},
        {"op": "insert", "after": [1], "client": 2, "counter": 5, "text": "x"},
        {"op": "insert", "after": None, "client": 2, "counter": MAX_COUNTER, "text": "xy"},
        {"op": "delete", "ranges": [[1, 1, 9]]},
        {"op": "delete", "ranges": [[1, 1]]},
        {"op": "delete", "ranges": "x"},
        {"op": "frob"},
    ],
)
def test_malformed_deltas_raise_value_error_and_change_nothing(delta: dict[str, Any]) -> None:
    rga = doc("abc")
    before = rga.state()
    with pytest.raises(ValueError):
        rga.apply_delta(delta)
    assert rga.state() == before


# -- state ---------------------------------------------------------------------------


def roundtrips(state: Any) -> list[Any]:
    return [
        msgpack.unpackb(msgpack.packb(state), raw=False),
        json.loads(json.dumps(state)),
    ]


def test_state_round_trips_through_msgpack_and_json() -> None:
    rga = doc("hello world")
    rga.apply_op({"op": "insert", "index": 5, "values": [1, {"a": None}]}, ctx(2))
    rga.apply_op({"op": "delete", "index": 2, "count": 4}, ctx(3))
    state = rga.state()
    for copy in roundtrips(state):
        back = Rga.from_state(copy)
        assert back.state() == state
        assert back.view(0) == rga.view(0)
        op = {"op": "insert", "index": 3, "text": "Z"}
        assert back.apply_op(op, ctx(5)) == rga.clone().apply_op(op, ctx(5))


@pytest.mark.parametrize(
    "state",
    [
        None,
        {"runs": "x"},
        {"runs": [[1, 1, None]]},
        {"runs": [[1, 0, None, "a"]]},
        {"runs": [[1, 1, None, ""]]},
        {"runs": [[1, 1, None, 0]]},
        {"runs": [[1, 1, None, 2.5]]},
        {"runs": [[1, 1, [1], "a"]]},
        {"runs": [[1, 1, [1, 7], "a"]]},
        {"runs": [[1, 1, None, "ab"], [1, 2, None, "c"]]},
        {"runs": [["1", 1, None, "a"]]},
        {"runs": [[1, MAX_COUNTER, None, "ab"]]},
    ],
)
def test_malformed_states_raise_value_error(state: Any) -> None:
    with pytest.raises(ValueError):
        Rga.from_state(state)


def test_clone_is_independent() -> None:
    rga = doc("abc")
    rga.apply_op({"op": "insert", "index": 0, "values": [[1]]}, ctx())
    copy = rga.clone()
    copy.apply_op({"op": "delete", "index": 0, "count": 2}, ctx())
    copy.apply_op({"op": "insert", "index": 1, "text": "Q"}, ctx())
    assert rga.view(0) == {"value": [[1], "a", "b", "c"]}
    assert copy.view(0) == {"value": ["b", "Q", "c"], "text": "bQc"}


# -- properties ------------------------------------------------------------------------


def causal_order(data: st.DataObject, deltas: list[dict[str, Any]]) -> list[int]:
    """A random delivery order in which every delta comes after those it needs,
    with some deltas delivered more than once."""
    made_by: dict[Id, int] = {}
    needs: list[set[int]] = []
    for i, delta in enumerate(deltas):
        if delta["op"] == "insert":
            n = len(delta["text"]) if "text" in delta else len(delta["values"])
            for k in range(n):
                made_by[(delta["client"], delta["counter"] + k)] = i
            deps = set() if delta["after"] is None else {made_by[tuple(delta["after"])]}
        else:
            deps = {made_by[pair] for pair in expand(delta["ranges"])}
        needs.append(deps)
    done: set[int] = set()
    order: list[int] = []
    while len(done) < len(deltas):
        ready = [i for i in range(len(deltas)) if i not in done and needs[i] <= done]
        pick = ready[data.draw(st.integers(0, len(ready) - 1))]
        done.add(pick)
        order.append(pick)
        if data.draw(st.integers(0, 4)) == 0:
            order.append(data.draw(st.sampled_from(order)))
    return order


@pytest.mark.usefixtures("small_limits")
@PROPERTY
@given(st.data())
def test_replicas_converge_to_the_server(data: st.DataObject) -> None:
    server = Rga.new()
    model = Model()
    deltas = []
    for _ in range(data.draw(st.integers(1, 30))):
        op = draw_op(data, model)
        deltas.append(apply_checked(server, model, op, data.draw(st.integers(1, 4))))
        # Typing bursts exercise the cursor paths.
        for _ in range(data.draw(st.integers(0, 3))):
            hot = server._seq.cursor
            if hot is None:
                break
            if data.draw(st.booleans()) or not hot:
                op = {"op": "insert", "index": hot, "text": data.draw(texts)}
            elif data.draw(st.booleans()):
                op = {"op": "delete", "index": hot - 1}
            else:
                # Deleting the end of the text before the cursor (a word at once).
                count = data.draw(st.integers(1, hot))
                op = {"op": "delete", "index": hot - count, "count": count}
            deltas.append(apply_checked(server, model, op, data.draw(st.sampled_from([1, 1, 2]))))
    for _ in range(2):
        replica = Rga.new()
        for i in causal_order(data, deltas):
            replica.apply_delta(deltas[i])
        assert replica.state() == server.state()
        assert replica.view(0) == server.view(0)
        assert replica.ids() == server.ids()
    for copy in roundtrips(server.state()):
        assert Rga.from_state(copy).state() == server.state()


def fork_ops(data: st.DataObject, rga: Rga, clients: list[int]) -> list[dict[str, Any]]:
    model = Model()
    for delta in replay_deltas(rga):
        model.apply(delta)
    deltas = []
    for _ in range(data.draw(st.integers(0, 8))):
        op = draw_op(data, model)
        delta = rga.apply_op(op, ctx(data.draw(st.sampled_from(clients))))
        model.apply(delta)
        deltas.append(delta)
    return deltas


def replay_deltas(rga: Rga) -> Iterator[dict[str, Any]]:
    """Deltas that rebuild ``rga`` (its state, as inserts then deletes)."""
    runs = rga.state()["runs"]
    for client, counter, after, content in sorted(runs, key=lambda run: run[1]):
        if isinstance(content, int):
            content = [None] * content
        key = "text" if isinstance(content, str) else "values"
        yield {"op": "insert", "after": after, "client": client, "counter": counter, key: content}
    for client, counter, _, content in runs:
        if isinstance(content, int):
            yield {"op": "delete", "ranges": [[client, counter, content]]}


@pytest.mark.usefixtures("small_limits")
@PROPERTY
@given(st.data())
def test_merge_is_a_join_and_agrees_with_deltas(data: st.DataObject) -> None:
    base = Rga.new()
    fork_ops(data, base, [1, 2])
    nodes = [base.clone() for _ in range(3)]
    forked = [fork_ops(data, node, [3 + 2 * i, 4 + 2 * i]) for i, node in enumerate(nodes)]
    a, b, c = nodes

    def joined(*parts: Rga) -> Rga:
        out = parts[0].clone()
        for part in parts[1:]:
            out.merge(part)
        return out

    ab, ba = joined(a, b), joined(b, a)
    assert ab.state() == ba.state()
    assert joined(ab, c).state() == joined(a, joined(b, c)).state()
    assert joined(a, a).state() == a.state()
    assert joined(ab, a).state() == ab.state()
    # Merging b equals receiving b's deltas since the fork.
    via_deltas = a.clone()
    for delta in forked[1]:
        via_deltas.apply_delta(delta)
    assert via_deltas.state() == ab.state()
    assert via_deltas.view(0) == ab.view(0)
    # A merged state keeps working: the server path and the replica path agree.
    op = {"op": "insert", "index": ab.length, "text": "end"}
    delta = ab.apply_op(op, ctx(99))
    via_deltas.apply_delta(delta)
    assert via_deltas.state() == ab.state()
    before = a.state()
    a.merge(a)
    assert a.state() == before


# -- element ids -------------------------------------------------------------------


def _spelled_once(text: str, signed: bool) -> int | None:
    """The id rules as first written: ASCII decimals, no leading zeros."""
    body = text[1:] if signed and text.startswith("-") else text
    if not body or not set(body) <= set("0123456789") or (len(body) > 1 and body[0] == "0"):
        return None
    return int(text)


def _reference(value: Any) -> tuple[int, int] | None:
    if type(value) is not str or len(value) > MAX_ID_CHARS:
        return None
    counter_text, sep, client_text = value.partition("@")
    counter = _spelled_once(counter_text, signed=False)
    client = _spelled_once(client_text, signed=True)
    if not sep or counter is None or client is None or counter < 1:
        return None
    return client, counter


_ID_PARTS = st.sampled_from(["0", "1", "7", "07", "12", "-", "@", ",", "\n", "٣", " ", "x"])
_IDS = st.lists(
    st.one_of(st.lists(_ID_PARTS, max_size=6).map("".join), st.integers(), st.none()),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(values=_IDS)
def test_ids_parse_one_by_one_and_together_by_the_same_rules(values: list[Any]) -> None:
    expected = [_reference(value) for value in values]
    for value, pair in zip(values, expected, strict=True):
        if pair is None:
            with pytest.raises(ApiError):
                parse_id(value, "ids")
        else:
            assert parse_id(value, "ids") == pair
    if None in expected:
        with pytest.raises(ApiError) as info:
            parse_ids(values, "ids")
        assert info.value.message.startswith("ids: must be an element id")
    else:
        assert parse_ids(values, "ids") == expected


def test_a_delete_by_thousands_of_ids_names_the_first_unknown_one() -> None:
    rga = doc("x" * 5000)
    ids = rga.ids()
    rga.apply_op({"op": "delete", "ids": ids[::2] + ids[:4]}, ctx())  # repeats are fine
    assert text_of(rga) == "x" * 2498
    with pytest.raises(ApiError) as info:
        rga.apply_op({"op": "delete", "ids": [ids[1], "99999@1", "5@77", ids[3]]}, ctx())
    assert info.value.message == "ids: unknown element id 99999@1"
    assert text_of(rga) == "x" * 2498
    assert rle_ids([(2, 5), (1, 3), (1, 4), (2, 5), (1, 9)]) == [[1, 3, 2], [1, 9, 1], [2, 5, 1]]


@settings(max_examples=200)
@given(
    runs=st.lists(
        st.tuples(st.integers(-2, 2), st.integers(1, 30), st.integers(1, 5)), min_size=1, max_size=8
    )
)
def test_id_runs_read_as_the_ids_they_hold_and_delete_as_those_would(
    runs: list[tuple[int, int, int]],
) -> None:
    held = IdRuns(runs)
    ids = sorted({(client, first + i) for client, first, count in runs for i in range(count)})
    strings = [f"{counter}@{client}" for client, counter in ids]
    assert list(held) == strings and held == strings and len(held) == len(strings)
    assert [held[i] for i in range(-len(held), len(held))] == strings * 2
    assert held[1:3] == strings[1:3]
    assert held.ranges() == rle_ids(ids) == rle_ids(parse_ids(strings, "ids"))
    with pytest.raises(IndexError):
        held[len(held)]
    # Deleting them: the same delta as the id strings, or the same refusal.
    for known in (True, False):
        by_runs, by_ids = Rga.new(), Rga.new()
        for rga in (by_runs, by_ids):
            for client in range(-2, 3):
                end = 40 if known or client != 1 else 3
                rga.apply_delta(
                    {
                        "op": "insert",
                        "after": None,
                        "client": client,
                        "counter": 1,
                        "text": "x" * end,
                    }
                )
        outcomes = []
        for rga, value in ((by_runs, held), (by_ids, strings)):
            try:
                outcomes.append(rga.apply_op({"op": "delete", "ids": value}, ctx()))
            except ApiError as exc:
                outcomes.append(exc.message)
        assert outcomes[0] == outcomes[1]
        assert by_runs.state() == by_ids.state()


def test_id_runs_are_runs_of_counters_from_one() -> None:
    assert IdRuns([(1, 3, 2), (1, 5, 1), (1, 4, 4), (0, 9, 1)]).ranges() == [[0, 9, 1], [1, 3, 5]]
    for bad in [(1, 0, 1), (1, 3, 0)]:
        with pytest.raises(ValueError):
            IdRuns([bad])
    empty = Rga.new()
    with pytest.raises(ApiError) as info:
        empty.apply_op({"op": "delete", "ids": IdRuns([])}, ctx())
    assert info.value.message == "ids: must be a non-empty array of element ids"
