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

Malformed deltas and states (which only this module makes) raise ValueError.

The structure lives in :mod:`syncd.crdt._rga_seq`; this module validates ops,
makes deltas and answers, and converts state. :meth:`Rga.apply_op` starts with
the shapes that make up most real editing written out inline: typing at the
cursor, an index insert of text anywhere, deleting the end of the text before
the cursor (backspace, or a word at once) and an index delete anywhere. An
editing trace is hundreds of thousands of one-character ops, and a method call
or a dict lookup per op shows in the total; every other shape, and every
malformed op, takes the general path, which checks everything and names the
field at fault.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, ClassVar, Self

from syncd.crdt._rga_ids import format_id, parse_id, rle_ids
from syncd.crdt._rga_seq import BLOCK_MAX, MAX_COUNTER, Block, Origin, Run, RunSeq
from syncd.crdt.base import JSON, OpContext
from syncd.crdt.validate import check_json
from syncd.errors import invalid_op


def _text_ok(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (JSON ``\\ud800`` escapes cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Rga(RunSeq):
    TYPE: ClassVar[str] = "rga"
    OPS: ClassVar[Mapping[str, int]] = {"insert": 0x01, "delete": 0x02}
    PREFIX: ClassVar[str] = "rg:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = True

    __slots__ = ()

    @classmethod
    def new(cls) -> Self:
        return cls()

    @property
    def length(self) -> int:
        """Visible elements."""
        self._sync()
        return self._len

    # -- ops -------------------------------------------------------------------

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        index = op.get("index")
        if type(index) is int and len(op) == 3:
            text = op.get("text")
            if type(text) is str and op.get("op") == "insert":
                # {"op": "insert", "index": i, "text": t}: three keys, so no
                # "after" or "values" to check for.
                n = len(text)
                client = ctx.client_id
                if index == self._hot_end:
                    end = index + n
                    if (
                        end <= self._hot_stop
                        and client == self._hot_client
                        and n
                        and (text.isascii() or _text_ok(text))
                    ):
                        # Typing at the cursor: the hot run grows (see RunSeq._pend).
                        self._pend += text
                        self._hot_end = end
                        counter = index + self._hot_shift
                        return {
                            "op": "insert",
                            "after": [client, counter - 1],
                            "client": client,
                            "counter": counter,
                            "text": text,
                        }
                    self._sync()
                    if n and self._max + n <= MAX_COUNTER and (text.isascii() or _text_ok(text)):
                        return self._insert_hot(index, text, client)
                else:
                    self._sync()
                    if (
                        n
                        and 0 <= index <= self._len
                        and self._max + n <= MAX_COUNTER
                        and (text.isascii() or _text_ok(text))
                    ):
                        origin, counter = self._insert_local(index, client, text, n)
                        return {
                            "op": "insert",
                            "after": None if origin is None else [*origin],
                            "client": client,
                            "counter": counter,
                            "text": text,
                        }
        kind = op.get("op")
        if kind == "insert":
            self._sync()
            return self._insert(op, ctx)
        if kind == "delete":
            self._sync()
            if type(index) is int and "ids" not in op:
                count = op.get("count", 1)
                if type(count) is int and count > 0 and index >= 0 and index + count <= self._len:
                    run = self._hot
                    if run is not None and index + count == self._hot_end and count < run.vis:
                        return self._backspace(run, count)
                    return {"op": "delete", "ranges": self._delete_at(index, count)}
            return self._delete(op)
        raise invalid_op(f"op: must be one of {', '.join(sorted(self.OPS))} for rga")

    def _insert_hot(self, index: int, text: str, client: int) -> dict[str, Any]:
        """Insert at the cursor right after the hot run when it cannot simply grow."""
        run = self._hot
        assert run is not None
        origin = (run.client, run.counter + run.n - 1)
        counter = self._max + 1
        n = len(text)
        self._max = counter + n - 1
        new, bi, ri = self._place(self._hot_bi, self._hot_ri + 1, client, counter, n, text, origin)
        self._set_hot(new, bi, ri, index + n)
        return {
            "op": "insert",
            "after": [*origin],
            "client": client,
            "counter": counter,
            "text": text,
        }

    def _backspace(self, run: Run, count: int) -> dict[str, Any]:
        """Delete the last ``count`` elements of the hot run (which keeps at least one)."""
        client = run.client
        keep = run.n - count
        first = run.counter + keep
        run.n = keep
        run.vis = keep
        run.content = run.content[:keep]
        self._hot_stop = -1  # its last element is no longer the newest
        self._bvis[self._hot_bi] -= count
        self._len -= count
        assert self._hot_end is not None
        self._hot_end -= count
        ri = self._hot_ri + 1
        runs = run.blk.runs
        nxt = runs[ri] if ri < len(runs) else None
        if (
            nxt is not None
            and not nxt.vis
            and nxt.client == client
            and nxt.counter == first + count
            and nxt.origin == (client, first + count - 1)
        ):
            # The elements join the deleted run after them (repeated backspace).
            if self._ids is not None:
                keys = self._ids[client][0]
                keys[bisect_left(keys, nxt.counter)] = first
            nxt.counter = first
            nxt.n += count
            nxt.origin = (client, first - 1)
        else:
            dead = Run(client, first, count, 0, None, (client, first - 1), run.blk)
            runs.insert(ri, dead)
            self._index_add(dead)
            if len(runs) > BLOCK_MAX:
                self._fix_block(self._hot_bi)
        return {"op": "delete", "ranges": [[client, first, count]]}

    def _insert(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
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
            check_json(values, "values")
            content = list(values)
            key = "values"
        n = len(content)
        if self._max + n > MAX_COUNTER:
            raise invalid_op(f"{key}: the element counter would pass {MAX_COUNTER}")
        client = ctx.client_id
        origin: Origin
        if has_index:
            index = op["index"]
            if type(index) is not int or not 0 <= index <= self._len:
                raise invalid_op(f"index: must be an integer from 0 to {self._len}")
            origin, counter = self._insert_local(index, client, content, n)
        else:
            after = op["after"]
            if after is None:
                origin = None
            else:
                origin = parse_id(after, "after")
                if self._lookup(*origin) is None:
                    raise invalid_op(f"after: unknown element id {after}")
            counter = self._insert_after(origin, client, content, n)
        return {
            "op": "insert",
            "after": None if origin is None else [origin[0], origin[1]],
            "client": client,
            "counter": counter,
            key: op[key],
        }

    def _delete(self, op: Mapping[str, Any]) -> dict[str, Any]:
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
            if index + count > self._len:
                raise invalid_op(
                    f"index, count: index + count must be at most the length {self._len}"
                )
            return {"op": "delete", "ranges": self._delete_at(index, count)}
        if "count" in op:
            raise invalid_op("count: goes with index, not with ids")
        ids = op["ids"]
        if type(ids) is not list or not ids:
            raise invalid_op("ids: must be a non-empty array of element ids")
        pairs = [parse_id(value, "ids") for value in ids]
        for pair in pairs:
            if self._lookup(*pair) is None:
                raise invalid_op(f"ids: unknown element id {format_id(*pair)}")
        ranges = rle_ids(pairs)
        for client, counter, count in ranges:
            self._delete_range(client, counter, count)
        return {"op": "delete", "ranges": ranges}

    # -- deltas ----------------------------------------------------------------

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        self._sync()
        kind = delta.get("op")
        if kind == "insert":
            client, counter, n, content, origin = _insert_delta(delta)
            if self._lookup(client, counter) is not None:
                return  # seen already: an op's elements arrive together or not at all
            # An unknown after element raises ValueError before anything changes.
            self._integrate(client, counter, n, content, origin)
        elif kind == "delete":
            ranges = _ranges(delta.get("ranges"))
            for client, counter, count in ranges:
                if not self._contains(client, counter, count):
                    raise ValueError(f"rga delta: unknown element in {format_id(client, counter)}")
            for client, counter, count in ranges:
                self._delete_range(client, counter, count)
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
        self._sync()
        parts: list[Any] = []
        all_text = True
        for blk in self._blocks:
            for run in blk.runs:
                if run.vis:
                    parts.append(run.content)
                    if type(run.content) is not str:
                        all_text = False
        if all_text:
            text = "".join(parts)
            return {"value": list(text), "text": text}
        values: list[Any] = []
        for part in parts:
            values.extend(part)  # a str part extends by its characters
        if all(type(value) is str for value in values):
            return {"value": values, "text": "".join(values)}
        return {"value": values}

    def ids(self) -> list[str]:
        """The ids of the visible elements, in order (for clients and tests)."""
        self._sync()
        return [
            f"{run.counter + k}@{run.client}"
            for run in self._runs()
            if run.vis
            for k in range(run.n)
        ]

    # -- restore -----------------------------------------------------------------

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        """Delete what was inserted (or is visible) now but not at the target;
        insert anew what was visible then and is deleted now, each run of such
        elements as one insert right after the element before it (deleted
        elements keep no content here, so the values come from the target).
        Both sequences share one order, so the visible result is the target's."""
        self._sync()
        target._sync()
        then: dict[tuple[int, int], Any] = {}
        for run in target._runs():
            if run.vis:
                for k in range(run.n):
                    then[(run.client, run.counter + k)] = run.content[k]
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

        for run in self._runs():
            for k in range(run.n):
                key = (run.client, run.counter + k)
                element = format_id(*key)
                if key in then:
                    if run.vis:
                        flush()
                    else:
                        if not pending:
                            after = prev
                        pending.append(then[key])
                else:
                    flush()
                    if run.vis:
                        deletes.append(element)
                prev = element
        flush()
        if deletes:
            inserts.append({"op": "delete", "ids": deletes})
        return inserts

    # -- state -------------------------------------------------------------------

    def state(self) -> JSON:
        self._sync()
        out: list[list[Any]] = []
        parts: list[Any] = []
        end = 0
        kind: type | None = None
        for run in self._runs():
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
        runs: list[Run] = []
        for entry in state["runs"]:
            runs.append(_state_run(entry))
        rga = cls()
        rga._load(runs)
        rga._check_loaded()
        return rga

    def _check_loaded(self) -> None:
        """Refuse a state whose ids overlap or whose origins are missing."""
        for _, runs in self._index().values():
            for a, b in pairwise(runs):
                if a.counter + a.n > b.counter:
                    raise ValueError(f"rga state: element {format_id(b.client, b.counter)} twice")
        for run in self._runs():
            if run.origin is not None and self._lookup(*run.origin) is None:
                raise ValueError(f"rga state: unknown origin {format_id(*run.origin)}")

    def merge(self, other: Self) -> None:
        self._sync()
        other._sync()
        # Theirs as plain tuples first: ``other`` may be ``self``.
        theirs = [(r.client, r.counter, r.n, r.content, r.origin) for r in other._runs()]
        # Causal order: an origin always has a smaller counter than its element.
        theirs.sort(key=lambda item: item[1])
        for client, counter, n, content, origin in theirs:
            self._merge_run(client, counter, n, content, origin)
        for client, counter, n, content, _ in theirs:
            if content is None:
                self._delete_range(client, counter, n)

    def _merge_run(self, client: int, first: int, n: int, content: Any, origin: Origin) -> None:
        """Integrate the elements of one of their runs that this state lacks."""
        counter = first
        end = first + n
        while counter < end:
            found = self._lookup(client, counter)
            if found is not None:
                run, off = found
                counter += run.n - off
                continue
            entry = self._index().get(client)
            keys = entry[0] if entry is not None else []
            pos = bisect_left(keys, counter)
            stop = min(end, keys[pos]) if pos < len(keys) else end
            k = counter - first
            part = None if content is None else content[k : k + stop - counter]
            self._integrate(
                client, counter, stop - counter, part, origin if k == 0 else (client, counter - 1)
            )
            counter = stop

    def clone(self) -> Self:
        self._sync()
        copy = type(self)()
        copy._load(
            [Run(r.client, r.counter, r.n, r.vis, r.content, r.origin, r.blk) for r in self._runs()]
        )
        return copy


def _joined(kind: type | None, parts: list[Any]) -> Any:
    if kind is str:
        return "".join(parts)
    if kind is list:
        return [value for part in parts for value in part]
    return sum(parts)


def _is_int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _id_pair(value: Any, what: str) -> tuple[int, int]:
    if (
        type(value) not in (list, tuple)
        or len(value) != 2
        or type(value[0]) is not int
        or not _is_int(value[1], 1, MAX_COUNTER)
    ):
        raise ValueError(f"rga {what}: an element id must be [client, counter]")
    return value[0], value[1]


def _insert_delta(delta: Mapping[str, Any]) -> tuple[int, int, int, Any, Origin]:
    client = delta.get("client")
    counter = delta.get("counter")
    if type(client) is not int or type(counter) is not int or counter < 1:
        raise ValueError("rga delta: client and counter must be integers")
    content: Any
    if "text" in delta:
        content = delta["text"]
        if type(content) is not str or not content:
            raise ValueError("rga delta: text must be a non-empty string")
    else:
        values = delta.get("values")
        if type(values) is not list or not values:
            raise ValueError("rga delta: values must be a non-empty array")
        content = list(values)
    after = delta.get("after")
    origin = None if after is None else _id_pair(after, "delta")
    if counter + len(content) - 1 > MAX_COUNTER:
        raise ValueError("rga delta: counter out of range")
    return client, counter, len(content), content, origin


def _ranges(value: Any) -> list[tuple[int, int, int]]:
    if type(value) is not list:
        raise ValueError("rga delta: ranges must be an array")
    out: list[tuple[int, int, int]] = []
    for item in value:
        if (
            type(item) not in (list, tuple)
            or len(item) != 3
            or type(item[0]) is not int
            or not _is_int(item[1], 1, MAX_COUNTER)
            or not _is_int(item[2], 1, MAX_COUNTER)
        ):
            raise ValueError("rga delta: a range must be [client, first_counter, count]")
        out.append((item[0], item[1], item[2]))
    return out


def _state_run(entry: Any) -> Run:
    if type(entry) not in (list, tuple) or len(entry) != 4:
        raise ValueError("rga state: a run must be [client, counter, after, content]")
    client, counter, after, content = entry
    if type(client) is not int or not _is_int(counter, 1, MAX_COUNTER):
        raise ValueError("rga state: client and counter must be integers")
    origin = None if after is None else _id_pair(after, "state")
    if type(content) is int:
        n, vis, content = content, 0, None
    elif type(content) is str:
        n = vis = len(content)
    elif type(content) is list:
        n = vis = len(content)
        content = list(content)
    else:
        raise ValueError("rga state: content must be a string, an array or a count")
    if n < 1 or counter + n - 1 > MAX_COUNTER:
        raise ValueError("rga state: a run must hold 1 or more elements within the counter range")
    return Run(client, counter, n, vis, content, origin, _NO_BLOCK)


_NO_BLOCK = Block([], -1)
"""Placeholder until :meth:`RunSeq._load` puts the run in its block (a real
Block, so that the types hold even where they are enforced, as mypyc does)."""
