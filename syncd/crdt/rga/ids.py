"""Element ids of the rga type: ``"<counter>@<client_id>"`` strings on the wire.

Inside the type an id is the pair ``(client, counter)``; deltas carry ids as
run-length ranges ``[client, first_counter, count]`` so that deleting ten
thousand characters is a few small lists, not ten thousand strings.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from syncd.errors import ApiError, invalid_op

MAX_ID_CHARS = 48
"""Longer than any id this service makes (two 64-bit integers and an ``@``);
refusing longer strings before ``int()`` keeps parsing cheap."""

_ID_RE = re.compile(r"([1-9][0-9]*)@(0|-?[1-9][0-9]*)")
"""``<counter>@<client>``: ASCII decimals, one spelling per id (no leading
zeros, so "07@1" cannot name the element "7@1", and no "-0", so "1@-0" cannot
name "1@0" of client 0), a counter from 1, a client that may be negative."""


def format_id(client: int, counter: int) -> str:
    return f"{counter}@{client}"


def _invalid(field: str) -> ApiError:
    return invalid_op(f"{field}: must be an element id string '<counter>@<client_id>'")


def parse_id(value: Any, field: str) -> tuple[int, int]:
    """``"<counter>@<client>"`` -> ``(client, counter)``; anything else is invalid_op."""
    if type(value) is str and len(value) <= MAX_ID_CHARS:
        found = _ID_RE.fullmatch(value)
        if found is not None:
            return int(found[2]), int(found[1])
    raise _invalid(field)


_IDS_RE = re.compile(r"(?:[1-9][0-9]*@(?:0|-?[1-9][0-9]*),)*[1-9][0-9]*@(?:0|-?[1-9][0-9]*)")
_PARTS_RE = re.compile(r"([1-9][0-9]*)@(-?[0-9]+)")


def parse_ids(values: list[Any], field: str) -> list[tuple[int, int]]:
    """:func:`parse_id` of each of ``values``. A revert deletes thousands of
    ids at once: they are checked together, joined by commas (which no id
    holds) and matched by one regex, and split by another; any other list,
    or one with a bad id, goes one id at a time (which names the fault)."""
    try:
        joined = ",".join(values)
    except TypeError:  # not all strings
        joined = None
    if (
        joined is not None
        and values
        and max(map(len, values)) <= MAX_ID_CHARS
        and _IDS_RE.fullmatch(joined)
    ):
        parts = _PARTS_RE.findall(joined)
        if len(parts) == len(values):  # so no value held a comma of its own
            return [(int(client), int(counter)) for counter, client in parts]
    return [parse_id(value, field) for value in values]


def rle_ids(ids: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Sorted, deduplicated ``(client, counter)`` pairs as ``[client, first, count]`` ranges."""
    pairs = list(ids)
    if any(a >= b for a, b in itertools.pairwise(pairs)):
        pairs = sorted(set(pairs))  # a revert's ids come sorted and distinct already
    ranges: list[list[int]] = []
    last: list[int] | None = None
    for client, counter in pairs:
        if last is not None and last[0] == client and last[1] + last[2] == counter:
            last[2] += 1
        else:
            last = [client, counter, 1]
            ranges.append(last)
    return ranges


class IdRuns(Sequence[str]):
    """Element ids held as runs of consecutive counters of one client, read
    as the id strings they stand for (``"<counter>@<client>"``, ascending).

    A revert deletes thousands of elements at once (an agent's whole text):
    it hands the rga ``{"op": "delete", "ids": IdRuns(...)}``, which the type
    deletes run by run (:meth:`ranges`) instead of formatting, parsing and
    sorting each id, and which reads as those ids everywhere else. No client
    can send one (JSON has no such type): a client's ``ids`` is a list."""

    __slots__ = ("_ranges", "_starts")

    def __init__(self, runs: Iterable[tuple[int, int, int]]) -> None:
        ranges: list[list[int]] = []
        for client, first, count in sorted(runs):
            if count < 1 or first < 1:
                raise ValueError("an id run is a client, a first counter >= 1 and a count >= 1")
            last = ranges[-1] if ranges else None
            if last is not None and last[0] == client and first <= last[1] + last[2]:
                last[2] = max(last[2], first + count - last[1])
            else:
                ranges.append([client, first, count])
        self._ranges = ranges
        self._starts = list(itertools.accumulate((r[2] for r in ranges), initial=0))

    def ranges(self) -> list[list[int]]:
        """The ids as ``[client, first, count]`` ranges: sorted, disjoint, each
        as long as it can be (what :func:`rle_ids` makes of the same ids)."""
        return [list(r) for r in self._ranges]

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("id index out of range")
        at = bisect.bisect_right(self._starts, index) - 1
        client, first, _ = self._ranges[at]
        return format_id(client, first + index - self._starts[at])

    def __iter__(self) -> Iterator[str]:
        for client, first, count in self._ranges:
            for counter in range(first, first + count):
                yield format_id(client, counter)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdRuns):
            return self._ranges == other._ranges
        if isinstance(other, list | tuple):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(map(tuple, self._ranges)))

    def __repr__(self) -> str:
        return f"IdRuns({[tuple(r) for r in self._ranges]!r})"
