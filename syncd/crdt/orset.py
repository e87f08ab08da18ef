"""Add-wins observed-remove set with dots and a causal context.

Every add makes a fresh dot ``(client_id, n)`` for its element and drops the
dots the element had (they are superseded). A remove drops the dots it observed.
Both record the dots they touch in the causal context (a version vector plus a
cloud of dots beyond it), so a dot that has been seen once is never added
again: deltas apply idempotently and in any order, and removed elements leave
no tombstones behind, only the version vector.

An element's identity is its canonical JSON (:func:`canonical_json`), so one
element may be written in several forms (``1.0`` and ``1``). Each dot keeps a
form: a fresh add's own, and an add of an element already there the form the
element read at the writer (carried in the delta as ``form``), so a set keeps
the form of the add that made the element. An element reads in the form of its
smallest live dot: a function of the dots alone, whatever order they came in
or whichever side a merge starts from (docs/data-model.md#orset).
"""

from __future__ import annotations

import json
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
Tags = dict[Dot, Any]
"""An element's live dots -> the form each keeps."""


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


def _forms_from(data: Iterable[Any]) -> dict[Dot, Any]:
    forms: dict[Dot, Any] = {}
    for item in data:
        cid, n, form = item
        if type(cid) is not int or type(n) is not int:
            raise ValueError(f"bad dot {item!r}")
        forms[(cid, n)] = form
    return forms


def _shown_form(tags: Tags) -> Any:
    """The form an element reads in: its smallest live dot's."""
    return tags[min(tags)]


_exact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
"""JSON as a read writes it, keys in their order: a read shows that too."""


def _same_form(a: Any, b: Any) -> bool:
    # Almost always one object: a dot made here, or loaded, shares its element's.
    return a is b or _exact(a) == _exact(b)


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
        """canonical JSON -> the element as it reads (its smallest dot's form)."""
        self._dots: dict[str, Tags] = {}
        """canonical JSON -> its live dots and their forms (never empty)."""
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
        live = self._dots.get(key)
        observed = _dot_list(live or ())
        if name == "add":
            dot = self._next_dot(ctx.client_id)
            delta = {"op": "add", "element": element, "dot": [dot[0], dot[1]], "dots": observed}
            form = element
            if live:
                # The element stays in the form it reads: the new dot keeps
                # that, and says so, since a replica may not hold the dots
                # it supersedes (yet, or ever).
                form = delta["form"] = self._values[key]
            self._integrate(key, form, dot, observed)
        else:
            delta = {"op": "remove", "element": element, "dots": observed}
            self._integrate(key, element, None, observed)
        return delta

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        element = delta["element"]
        key = canonical_json(element)
        dot = delta.get("dot")
        form = element
        if "form" in delta:
            form = delta["form"]
        elif dot is not None and delta["dots"] and key in self._values:
            # A record of an earlier version, which wrote no form: it is
            # replayed in seq order, so the element reads here as it did at
            # the writer, and that is the form the writer kept.
            form = self._values[key]
        self._integrate(key, form, (dot[0], dot[1]) if dot is not None else None, delta["dots"])

    def _integrate(
        self, key: str, form: Any, dot: Dot | None, removed: Iterable[Iterable[int]]
    ) -> None:
        tags = self._dots.get(key)
        if tags is None:
            tags = {}
        for cid, n in removed:
            self._record((cid, n))
            tags.pop((cid, n), None)
        if dot is not None and not self._seen(dot):
            tags[dot] = form
            self._record(dot)
        if tags:
            self._dots[key] = tags
            self._values[key] = _shown_form(tags)
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
        elements: list[list[Any]] = []
        forms: list[list[Any]] = []
        for key in sorted(self._values):
            shown, tags = self._values[key], self._dots[key]
            elements.append([shown, _dot_list(tags)])
            forms += [[cid, n, f] for (cid, n), f in tags.items() if not _same_form(f, shown)]
        state: dict[str, Any] = {
            "elements": elements,
            "vv": counts_state(self._vv),
            "cloud": _dot_list(self._cloud),
        }
        if forms:
            # Only dots whose form is not the one their element reads in
            # (concurrent adds of one element in two forms): a set of one
            # server never has any, and its state reads as before forms.
            state["forms"] = sorted(forms, key=lambda item: (item[0], item[1]))
        return state

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        new = cls()
        forms = _forms_from(state.get("forms", ()))
        for element, dots in state["elements"]:
            key = canonical_json(element)
            parsed = _dots_from(dots)
            if parsed:
                # Identities are recomputed here, not stored: a state written
                # when 1 and 1.0 were two elements holds both, now one element
                # that keeps the first's value and both their dots. A dot not
                # in "forms" (every dot of a state written before them) keeps
                # that value, so the element reads as it did.
                shown = new._values.setdefault(key, element)
                tags = new._dots.setdefault(key, {})
                for dot in parsed:
                    tags[dot] = forms.get(dot, shown)
        for key, tags in new._dots.items():
            new._values[key] = _shown_form(tags)
        new._vv = counts_from(state["vv"])
        for dot in _dots_from(state["cloud"]):
            new._record(dot)
        for tags in new._dots.values():
            for dot in tags:
                new._record(dot)
        return new

    def merge(self, other: Self) -> None:
        # A dot survives when both sides hold it, or one side holds it and the
        # other has never seen it; a dot seen but not held was removed.
        # A dot's form is fixed when it is made, so both sides hold it alike.
        merged: dict[str, Tags] = {}
        values: dict[str, Any] = {}
        empty: Tags = {}
        for key in self._dots.keys() | other._dots.keys():
            mine = self._dots.get(key, empty)
            theirs = other._dots.get(key, empty)
            keep = {d: f for d, f in mine.items() if d in theirs or not other._seen(d)}
            keep.update({d: f for d, f in theirs.items() if d not in mine and not self._seen(d)})
            if keep:
                merged[key] = keep
                values[key] = _shown_form(keep)
        self._values = values
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
        new._dots = {key: dict(tags) for key, tags in self._dots.items()}
        new._vv = dict(self._vv)
        new._cloud = set(self._cloud)
        return new
