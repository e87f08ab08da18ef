"""RGA: a replicated sequence of JSON values (text is one element per character).

Ops (docs/data-model.md#rga)::

    {"op": "insert", "index": 3 | "after": "5@2" | null, "text": "abc" | "values": [...]}
    {"op": "delete", "index": 3, "count": 2}  |  {"op": "delete", "ids": ["5@2", ...]}

Deltas (what a replica needs; ids as ``[client, counter]``, deletions as
run-length ranges ``[client, first_counter, count]``)::

    {"op": "insert", "after": [client, counter] | None, "client": c, "counter": first,
     "text": "abc" | "values": [...]}
    {"op": "delete", "ranges": [[client, first, count], ...]}

State (``?format=crdt``): ``{"runs": [[client, counter, after, content], ...]}``
in document order, ``after`` the first element's origin (``[client, counter]``
or None), each later element's origin being its predecessor, and ``content`` a
string (visible text), an array (visible values) or a count (deleted elements).

Malformed deltas and states (which only this type makes) raise ValueError
(:mod:`syncd.crdt.rga.wire` checks them).

The structure lives in :mod:`syncd.crdt.rga.sequence`, which alone changes it;
this module validates ops, makes deltas and answers, and converts state,
through the sequence's public methods only. :meth:`Rga.apply_op` recognises
the shapes that make up most real editing first, with as few checks as will
do: typing at the cursor (one call to :meth:`RunSeq.type_text`), an index
insert of text anywhere, and an index delete (the sequence takes backspace
its short way). An editing trace is hundreds of thousands of one-character
ops, and a method call or a dict lookup per op shows in the total; every
other shape, and every malformed op, takes the general path, which checks
everything and names the field at fault.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.rga import revert
from syncd.crdt.rga.ids import IdRuns, format_id, id_ranges, parse_id
from syncd.crdt.rga.sequence import MAX_COUNTER, Origin, RunSeq
from syncd.crdt.rga.wire import insert_delta, ranges_of, state_run
from syncd.crdt.validate import check_fields, check_json, op_fields, shown_json
from syncd.errors import invalid_op

INSERT_FIELDS = op_fields("index", "after", "text", "values")
DELETE_FIELDS = op_fields("index", "count", "ids")
"""The fields of ``insert`` and ``delete`` (docs/data-model.md#rga). The
typing fast path (``op``, ``index`` and ``text`` alone) needs no check."""


def _text_ok(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (JSON ``\\ud800`` escapes cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Rga:
    TYPE: ClassVar[str] = "rga"
    OPS: ClassVar[Mapping[str, int]] = {"insert": 0x01, "delete": 0x02}
    PREFIX: ClassVar[str] = "rg:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = True
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = True

    __slots__ = ("_seq",)

    def __init__(self, seq: RunSeq | None = None) -> None:
        self._seq: RunSeq = RunSeq() if seq is None else seq

    @classmethod
    def new(cls) -> Self:
        return cls()

    @property
    def length(self) -> int:
        """Visible elements."""
        return self._seq.length

    # -- ops -------------------------------------------------------------------

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        index = op.get("index")
        if type(index) is int:
            kind = op.get("op")
            if kind == "insert":
                text = op.get("text")
                if (
                    len(op) == 3
                    and type(text) is str
                    and text
                    and (text.isascii() or _text_ok(text))
                ):
                    # {"op": "insert", "index": i, "text": t}: three keys, so no
                    # "after" or "values" to check for.
                    client = ctx.client_id
                    seq = self._seq
                    counter = seq.type_text(index, text, client)
                    if counter:
                        return {
                            "op": "insert",
                            "after": [client, counter - 1],
                            "client": client,
                            "counter": counter,
                            "text": text,
                        }
                    done = seq.insert_text(index, text, client)
                    if done is not None:
                        origin, counter = done
                        return {
                            "op": "insert",
                            "after": None if origin is None else [*origin],
                            "client": client,
                            "counter": counter,
                            "text": text,
                        }
                return self._insert(op, ctx)
            if kind == "delete" and "ids" not in op:
                check_fields(op, DELETE_FIELDS)
                count = op.get("count", 1)
                if type(count) is int and count > 0:
                    ranges = self._seq.delete_at(index, count)
                    if ranges is not None:
                        return {"op": "delete", "ranges": ranges}
        kind = op.get("op")
        if kind == "insert":
            return self._insert(op, ctx)
        if kind == "delete":
            return self._delete(op)
        raise invalid_op(f"op: must be one of {', '.join(sorted(self.OPS))} for rga")

    def _insert(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        check_fields(op, INSERT_FIELDS)
        has_index = "index" in op
        if has_index == ("after" in op):
            raise invalid_op("index, after: an insert takes exactly one of index or after")
        has_text = "text" in op
        if has_text == ("values" in op):
            raise invalid_op("text, values: an insert takes exactly one of text or values")
        content: Any
        if has_text:
            content = op["text"]
            if type(content) is not str or not content:
                raise invalid_op("text: must be a non-empty string")
            if not (content.isascii() or _text_ok(content)):
                raise invalid_op("text: not encodable as UTF-8 (a lone surrogate)")
            key = "text"
        else:
            values = op["values"]
            if type(values) is not list or not values:
                raise invalid_op("values: must be a non-empty array")
            # The array is the field; each of its elements is a value.
            check_json(values, "values", level=0)
            content = list(values)
            key = "values"
        seq = self._seq
        n = len(content)
        if seq.clock + n > MAX_COUNTER:
            raise invalid_op(f"{key}: the element counter would pass {MAX_COUNTER}")
        client = ctx.client_id
        origin: Origin
        if has_index:
            index = op["index"]
            length = seq.length
            if type(index) is not int or not 0 <= index <= length:
                raise invalid_op(f"index: must be an integer from 0 to {length}")
            origin, counter = seq.insert_at(index, client, content, n)
        else:
            after = op["after"]
            if after is None:
                origin = None
            else:
                origin = parse_id(after, "after")
                if not seq.has(*origin):
                    raise invalid_op(f"after: unknown element id {after}")
            counter = seq.insert_after(origin, client, content, n)
        return {
            "op": "insert",
            "after": None if origin is None else [origin[0], origin[1]],
            "client": client,
            "counter": counter,
            key: op[key],
        }

    def _delete(self, op: Mapping[str, Any]) -> dict[str, Any]:
        check_fields(op, DELETE_FIELDS)
        has_index = "index" in op
        if has_index == ("ids" in op):
            raise invalid_op("index, ids: a delete takes exactly one of index or ids")
        if has_index:
            index = op["index"]
            count = op.get("count", 1)
            if type(count) is not int or count < 1:
                raise invalid_op("count: must be a positive integer")
            if type(index) is not int or index < 0:
                raise invalid_op("index: must be a non-negative integer")
            deleted = self._seq.delete_at(index, count)
            if deleted is None:
                raise invalid_op(
                    f"index, count: index + count must be at most the length {self._seq.length}"
                )
            return {"op": "delete", "ranges": deleted}
        if "count" in op:
            raise invalid_op("count: goes with index, not with ids")
        ids = op["ids"]
        if type(ids) is IdRuns:  # a revert's (ids.py): runs, not strings
            ranges = ids.ranges()
        elif type(ids) is not list or not ids:
            raise invalid_op("ids: must be a non-empty array of element ids")
        else:
            ranges = id_ranges(ids, "ids")
        seq = self._seq
        # Checked by ranges (a revert deletes thousands of ids, mostly in long
        # runs; a select-all, a range per run); an unknown one is named as the
        # first in the op's order.
        if not ranges or not seq.contains_ranges(ranges):
            unknown = next((v for v in ids if not seq.has(*parse_id(v, "ids"))), None)
            raise invalid_op(
                "ids: must be a non-empty array of element ids"
                if unknown is None
                else f"ids: unknown element id {unknown}"
            )
        seq.delete_ranges(ranges)
        return {"op": "delete", "ranges": ranges}

    # -- deltas ----------------------------------------------------------------

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        seq = self._seq
        kind = delta.get("op")
        if kind == "insert":
            client, counter, n, content, origin = insert_delta(delta)
            # Seen already: nothing happens. An unknown after element raises
            # ValueError before anything changes.
            seq.integrate(client, counter, n, content, origin)
        elif kind == "delete":
            ranges = ranges_of(delta.get("ranges"))
            if not seq.contains_ranges(ranges):
                for client, counter, count in ranges:
                    if not seq.contains(client, counter, count):
                        raise ValueError(
                            f"rga delta: unknown element in {format_id(client, counter)}"
                        )
            seq.delete_ranges(ranges)
        else:
            raise ValueError(f"rga delta: unknown op {kind!r}")

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        if delta.get("op") != "insert":
            return {}
        client = delta["client"]
        first = delta["counter"]
        n = len(delta["text"] if "text" in delta else delta["values"])
        return {"ids": [f"{counter}@{client}" for counter in range(first, first + n)]}

    # -- reading -----------------------------------------------------------------

    def view(self, now_ms: int) -> dict[str, Any]:
        parts = self._seq.visible_contents()
        try:
            text = "".join(parts)  # a TypeError when some part holds values
        except TypeError:
            pass
        else:
            return {"value": list(text), "text": text}
        values: list[Any] = []
        for part in parts:
            values.extend(part)  # a str part extends by its characters
        if all(type(value) is str for value in values):
            return {"value": values, "text": "".join(values)}
        return {"value": values}

    def run_count(self) -> int:
        """Runs in the sequence (syncd.crdt.engine's memory estimate counts them)."""
        return self._seq.run_count()

    def ids(self) -> list[str]:
        """The ids of the visible elements, in order (for clients and tests)."""
        return [
            f"{run.counter + k}@{run.client}"
            for run in self._seq.runs()
            if run.vis
            for k in range(run.n)
        ]

    # -- revert and restore --------------------------------------------------------

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """:func:`syncd.crdt.rga.revert.revert_ops` on this sequence."""
        if base is None:
            raise ValueError("an rga's revert reads the base")
        return revert.revert_ops(self._seq, window, base)

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        """Delete what was inserted (or is visible) now but not at the target;
        insert anew what was visible then and is deleted now, each run of such
        elements as one insert right after the element before it (deleted
        elements keep no content here, so the values come from the target).
        Both sequences share one order, so the visible result is the target's.
        No ops when this sequence already reads as the target (the same values,
        as a read shows them, under other ids: text a revert brought back):
        a restore applies nothing when the value equals the one then."""
        if shown_json(self.view(0)["value"]) == shown_json(target.view(0)["value"]):
            return []
        # What the target shows, per client: its visible runs by first counter.
        # Runs, not elements: deleted elements, which a run of any length
        # holds in a few bytes (a megabyte of text typed and deleted, again
        # and again), cost nothing here (one step per element took seconds).
        then: dict[int, list[tuple[int, int, Any]]] = {}
        for run in target._seq.runs():
            if run.vis:
                then.setdefault(run.client, []).append((run.counter, run.n, run.content))
        firsts: dict[int, list[int]] = {}
        for client, spans in then.items():
            spans.sort(key=lambda span: span[0])
            firsts[client] = [span[0] for span in spans]
        deletes: list[str] = []
        inserts: list[dict[str, Any]] = []
        pending: list[Any] = []
        after: str | None = None
        prev: str | None = None

        def flush() -> None:
            if pending:
                if all(type(v) is str and len(v) == 1 for v in pending):
                    inserts.append({"op": "insert", "after": after, "text": "".join(pending)})
                else:
                    inserts.append({"op": "insert", "after": after, "values": list(pending)})
                pending.clear()

        for run in self._seq.runs():
            client = run.client
            spans = then.get(client, [])
            starts = firsts.get(client, [])
            counter, end = run.counter, run.counter + run.n
            at = bisect_right(starts, counter) - 1
            while counter < end:
                # The stretch from ``counter`` that the target shows (inside
                # span ``at``), or that it does not (up to the next span).
                if at >= 0 and counter < spans[at][0] + spans[at][1]:
                    first, n, content = spans[at]
                    stop = min(end, first + n)
                    if run.vis:
                        flush()
                    else:
                        if not pending:
                            after = prev
                        pending.extend(content[counter - first : stop - first])
                else:
                    stop = min(end, starts[at + 1]) if at + 1 < len(starts) else end
                    flush()
                    if run.vis:
                        deletes += [format_id(client, c) for c in range(counter, stop)]
                counter = stop
                prev = format_id(client, stop - 1)
                if at + 1 < len(starts) and starts[at + 1] <= counter:
                    at += 1
        flush()
        if deletes:
            inserts.append({"op": "delete", "ids": deletes})
        return inserts

    # -- state -------------------------------------------------------------------

    def state(self) -> JSON:
        out: list[list[Any]] = []
        parts: list[Any] = []
        end = 0
        kind: type | None = None
        for run in self._seq.runs():
            content = run.content
            if (
                out
                and type(content) is kind
                and run.counter == end
                and run.client == out[-1][0]
                and run.origin == (run.client, end - 1)
            ):
                # Block and length limits split runs internally; the state
                # shows each chain once, so equal sequences give equal states.
                parts.append(run.n if content is None else content)
            else:
                if out:
                    out[-1][3] = _joined(kind, parts)
                parts = [run.n if content is None else content]
                kind = type(content)
                origin = run.origin
                out.append([run.client, run.counter, None if origin is None else [*origin], None])
            end = run.counter + run.n
        if out:
            out[-1][3] = _joined(kind, parts)
        return {"runs": out}

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        if type(state) is not dict or type(state.get("runs")) is not list:
            raise ValueError("rga state: must be a map with a runs array")
        return cls(RunSeq.load([state_run(entry) for entry in state["runs"]]))

    def merge(self, other: Self) -> None:
        self._seq.merge(other._seq)

    def clone(self) -> Self:
        return type(self)(self._seq.clone())


def _joined(kind: type | None, parts: list[Any]) -> Any:
    if kind is str:
        return "".join(parts)
    if kind is list:
        return [value for part in parts for value in part]
    return sum(parts)
