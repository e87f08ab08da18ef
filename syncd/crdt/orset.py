"""Add-wins observed-remove set with dots and a causal context.

Every add makes a fresh dot ``(client_id, n)`` for its element and drops the
dots the element had (they are superseded). A remove drops the dots it observed.
Both record the dots they touch in the causal context (a version vector plus a
cloud of dots beyond it), so a dot that has been seen once is never added
again: deltas apply idempotently and in any order, and removed elements leave
no tombstones behind, only the version vector.

An element's identity is its canonical JSON (:func:`canonical_json`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.gcounter import counts_from, counts_state
from syncd.crdt.validate import (
    MAX_ELEMENT_BYTES,
    canonical_json,
    check_fields,
    json_value,
    op_fields,
    op_name,
    required,
    shown_json,
)
from syncd.crdt.window import BaseNeeded

ELEMENT_FIELDS = op_fields("element")
"""The fields of ``add`` and ``remove`` (docs/data-model.md#orset)."""

Dot = tuple[int, int]


def _dot_list(dots: Iterable[Dot]) -> list[list[int]]:
    return [[cid, n] for cid, n in sorted(dots)]


def _dots_from(data: Iterable[Any]) -> set[Dot]:
    dots: set[Dot] = set()
    for item in data:
        cid, n = item
        if type(cid) is not int or type(n) is not int:
            raise ValueError(f"bad dot {item!r}")
        dots.add((cid, n))
    return dots


class ORSet:
    TYPE: ClassVar[str] = "orset"
    OPS: ClassVar[Mapping[str, int]] = {"add": 0x01, "remove": 0x02}
    PREFIX: ClassVar[str] = "or:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = True
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = False

    __slots__ = ("_cloud", "_dots", "_values", "_vv")

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        """canonical JSON -> the element."""
        self._dots: dict[str, set[Dot]] = {}
        """canonical JSON -> its live dots (never empty)."""
        self._vv: dict[int, int] = {}
        """Causal context: every dot (cid, n <= vv[cid]) has been seen ..."""
        self._cloud: set[Dot] = set()
        """... and so has every dot in the cloud (those past a gap)."""

    @classmethod
    def new(cls) -> Self:
        return cls()

    # -- causal context ---------------------------------------------------

    def _seen(self, dot: Dot) -> bool:
        return dot[1] <= self._vv.get(dot[0], 0) or dot in self._cloud

    def _record(self, dot: Dot) -> None:
        cid, n = dot
        top = self._vv.get(cid, 0)
        if n <= top:
            return
        if n != top + 1:
            self._cloud.add(dot)
            return
        top = n
        cloud = self._cloud
        while cloud and (cid, top + 1) in cloud:
            top += 1
            cloud.discard((cid, top))
        self._vv[cid] = top

    def _next_dot(self, cid: int) -> Dot:
        n = self._vv.get(cid, 0) + 1
        while (cid, n) in self._cloud:
            n += 1
        return (cid, n)

    # -- ops --------------------------------------------------------------

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        name = op_name(op, self.OPS, self.TYPE)
        check_fields(op, ELEMENT_FIELDS)
        element = required(op, "element")
        key = json_value(element, "element", MAX_ELEMENT_BYTES)
        observed = _dot_list(self._dots.get(key, ()))
        if name == "add":
            dot = self._next_dot(ctx.client_id)
            delta = {"op": "add", "element": element, "dot": [dot[0], dot[1]], "dots": observed}
            self._integrate(key, element, dot, observed)
        else:
            delta = {"op": "remove", "element": element, "dots": observed}
            self._integrate(key, element, None, observed)
        return delta

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        element = delta["element"]
        dot = delta.get("dot")
        self._integrate(
            canonical_json(element),
            element,
            (dot[0], dot[1]) if dot is not None else None,
            delta["dots"],
        )

    def _integrate(
        self, key: str, element: Any, dot: Dot | None, removed: Iterable[Iterable[int]]
    ) -> None:
        dots = self._dots.get(key)
        if dots is None:
            dots = set()
        for cid, n in removed:
            self._record((cid, n))
            dots.discard((cid, n))
        if dot is not None and not self._seen(dot):
            dots.add(dot)
            self._record(dot)
        if dots:
            self._dots[key] = dots
            self._values.setdefault(key, element)
        else:
            self._dots.pop(key, None)
            self._values.pop(key, None)

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    # -- views and state --------------------------------------------------

    def view(self, now_ms: int) -> dict[str, Any]:
        return {"value": [self._values[key] for key in sorted(self._values)]}

    def __contains__(self, element: Any) -> bool:
        return canonical_json(element) in self._values

    def state(self) -> JSON:
        return {
            "elements": [[self._values[k], _dot_list(self._dots[k])] for k in sorted(self._values)],
            "vv": counts_state(self._vv),
            "cloud": _dot_list(self._cloud),
        }

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        new = cls()
        for element, dots in state["elements"]:
            key = canonical_json(element)
            parsed = _dots_from(dots)
            if parsed:
                # Identities are recomputed here, not stored: a state written
                # when 1 and 1.0 were two elements holds both, now one element
                # that keeps the first's value and both their dots.
                new._values.setdefault(key, element)
                new._dots.setdefault(key, set()).update(parsed)
        new._vv = counts_from(state["vv"])
        for dot in _dots_from(state["cloud"]):
            new._record(dot)
        for parsed in new._dots.values():
            for dot in parsed:
                new._record(dot)
        return new

    def merge(self, other: Self) -> None:
        # A dot survives when both sides hold it, or one side holds it and the
        # other has never seen it; a dot seen but not held was removed.
        merged: dict[str, set[Dot]] = {}
        for key in self._dots.keys() | other._dots.keys():
            mine = self._dots.get(key, set())
            theirs = other._dots.get(key, set())
            keep = (mine & theirs) | {d for d in mine - theirs if not other._seen(d)}
            keep |= {d for d in theirs - mine if not self._seen(d)}
            if keep:
                merged[key] = keep
                if key not in self._values:
                    self._values[key] = other._values[key]
        for key in list(self._values):
            if key not in merged:
                del self._values[key]
        self._dots = merged
        for cid, top in other._vv.items():
            if top > self._vv.get(cid, 0):
                self._vv[cid] = top
        for dot in list(self._cloud) + list(other._cloud):
            self._cloud.discard(dot)
            self._record(dot)
        # Cloud dots now covered by a grown version vector are dropped too.
        for dot in list(self._cloud):
            if dot[1] <= self._vv.get(dot[0], 0):
                self._cloud.discard(dot)

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        # Adds make new dots, so an element removed since comes back even
        # though its old dots stay removed.
        ops: list[dict[str, Any]] = [
            {"op": "add", "element": target._values[key]}
            for key in sorted(target._values.keys() - self._values.keys())
        ]
        ops += [
            {"op": "remove", "element": self._values[key]}
            for key in sorted(self._values.keys() - target._values.keys())
        ]
        # An element of both in another form (1.0 then, 1 now: one identity,
        # read as the form of the add that made it) is removed and added in
        # the target's form, as a register's and a tree's restore compare
        # values as a read shows them: a restore brings back what was read.
        for key in sorted(self._values.keys() & target._values.keys()):
            then = target._values[key]
            if shown_json(then) != shown_json(self._values[key]):
                ops += [
                    {"op": "remove", "element": self._values[key]},
                    {"op": "add", "element": then},
                ]
        return ops

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """Membership as if the marked ops had not been made, for each element
        they touched: the last unmarked op on it decides (an add-wins set on
        one server is last-op-wins), else whether it was there before the
        window, which the first op on it tells (the dots it observed). An
        element that should be gone is removed: every live dot it has then
        comes from a marked add (an unmarked add would be its last unmarked
        op, or a later unmarked remove observed it), so that removes only
        their add-tags. One that should be there is added with a new dot.

        And in the form a read would show without the marked ops (``1.0``
        and ``1`` are one element, read in the form of the add that made it):
        the unmarked add that made it in a replay of the unmarked ops, else
        the form it had before the window. One that is there in another form
        is removed and added in that form, as a restore does. The form before
        the window is the one it reads now when no op in the window removed
        it; else it is read off ``base``, which the caller gives when asked
        (:class:`~syncd.crdt.window.BaseNeeded`): the window is enough
        otherwise."""
        elements: dict[str, Any] = {}
        before: dict[str, bool] = {}
        form: dict[str, tuple[Any]] = {}
        """An element's form in the replay of the unmarked ops, where an add
        of them made it (absent: the form before the window)."""
        last_other: dict[str, bool] = {}
        removed: set[str] = set()
        for delta, marked in window:
            key = canonical_json(delta["element"])
            adds = delta["op"] == "add"
            if key not in before:
                before[key] = bool(delta["dots"])
            if not adds:
                removed.add(key)
            if marked:
                elements[key] = delta["element"]
                continue
            if adds and not last_other.get(key, before[key]):
                form[key] = (delta["element"],)
            elif not adds:
                form.pop(key, None)
            last_other[key] = adds
        ops: list[dict[str, Any]] = []
        for key in sorted(elements):
            wanted = last_other.get(key, before[key])
            here = key in self._values
            if not wanted:
                if here:
                    ops.append({"op": "remove", "element": self._values[key]})
                continue
            if key in form:
                then = form[key][0]
            elif here and key not in removed:
                continue  # there since before the window, in its form then
            else:
                if base is None:
                    raise BaseNeeded
                was = base.crdt()
                assert isinstance(was, ORSet)
                then = was._values.get(key, elements[key])
            if not here:
                ops.append({"op": "add", "element": then})
            elif shown_json(then) != shown_json(self._values[key]):
                ops += [
                    {"op": "remove", "element": self._values[key]},
                    {"op": "add", "element": then},
                ]
        return ops

    def clone(self) -> Self:
        new = type(self)()
        new._values = dict(self._values)
        new._dots = {key: set(dots) for key, dots in self._dots.items()}
        new._vv = dict(self._vv)
        new._cloud = set(self._cloud)
        return new
