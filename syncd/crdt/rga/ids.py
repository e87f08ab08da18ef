"""Element ids of the rga type: ``"<counter>@<client_id>"`` strings on the wire.

Inside the type an id is the pair ``(client, counter)``; deltas carry ids as
run-length ranges ``[client, first_counter, count]`` so that deleting ten
thousand characters is a few small lists, not ten thousand strings.
"""

from __future__ import annotations

import bisect
import itertools
import operator
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


def _joined_ids(values: list[Any]) -> str | None:
    """``values`` joined by commas (which no id holds) when every one of
    them is a well-spelled id, checked by one regex; else None."""
    try:
        joined = ",".join(values)
    except TypeError:  # not all strings
        return None
    if values and max(map(len, values)) <= MAX_ID_CHARS and _IDS_RE.fullmatch(joined):
        return joined
    return None


def parse_ids(values: list[Any], field: str) -> list[tuple[int, int]]:
    """:func:`parse_id` of each of ``values``. A revert deletes thousands of
    ids at once: they are checked together, joined by commas (which no id
    holds) and matched by one regex, and split by another; any other list,
    or one with a bad id, goes one id at a time (which names the fault)."""
    joined = _joined_ids(values)
    if joined is not None:
        parts = _PARTS_RE.findall(joined)
        if len(parts) == len(values):  # so no value held a comma of its own
            return [(int(client), int(counter)) for counter, client in parts]
    return [parse_id(value, field) for value in values]


def id_ranges(values: list[Any], field: str) -> list[list[int]]:
    """``rle_ids(parse_ids(values, field))``, at C speed per id.

    A select-all delete in an editor sends every id of the document, in
    document order (not sorted: each client's runs interleave): 95,000 ids
    held the event loop for over a second, nearly all of it in making a
    tuple of each id in Python and sorting all of them. Here every step that
    visits each id is one C-level call over all of them (split, ``int``, the
    differences between neighbours, picking out where they are not 1); what
    Python loops over is the runs of consecutive ids found that way, which
    are then sorted and joined where they meet or overlap (repeats)."""
    joined = _joined_ids(values)
    if joined is None:
        return rle_ids(parse_ids(values, field))
    parts = joined.replace("@", ",").split(",")
    if len(parts) != 2 * len(values):  # a value held a comma of its own
        return rle_ids(parse_ids(values, field))
    counters = list(map(int, parts[0::2]))
    clients = list(map(int, parts[1::2]))
    return _join_runs(clients, counters)


def _join_runs(clients: list[int], counters: list[int]) -> list[list[int]]:
    """The ids ``zip(clients, counters)`` (at least one) as :func:`rle_ids` ranges."""
    n = len(counters)
    tail_counters = itertools.islice(counters, 1, None)
    tail_clients = itertools.islice(clients, 1, None)
    # Where a new run starts: the counter does not step by one, or the client changes.
    gaps = map(operator.ne, map(operator.sub, tail_counters, counters), itertools.repeat(1))
    switches = map(operator.ne, tail_clients, clients)
    starts = [0, *itertools.compress(range(1, n), map(operator.or_, gaps, switches))]
    ends = [*starts[1:], n]
    found = sorted(
        (clients[start], counters[start], end - start)
        for start, end in zip(starts, ends, strict=True)
    )
    ranges: list[list[int]] = []
    last: list[int] | None = None
    for client, first, count in found:
        if last is not None and last[0] == client and first <= last[1] + last[2]:
            last[2] = max(last[2], first + count - last[1])
        else:
            last = [client, first, count]
            ranges.append(last)
    return ranges


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
