"""Reading what other replicas send: insert and delete deltas, and state runs.

Only this service makes deltas and states, so a malformed one is a bug or
damage, not a user's mistake: each check raises ValueError (not an API error)
and names what is wrong, before the sequence is touched. Element ids arrive
as ``[client, counter]`` pairs here, not as the ``"counter@client"`` strings
of client ops (:mod:`syncd.crdt.rga.ids`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.crdt.rga.sequence import MAX_COUNTER, NO_BLOCK, Origin, Run

Entry = tuple[int, int, int, Any, Origin]
"""New elements as data: ``(client, counter, n, content, origin)``."""


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


def insert_delta(delta: Mapping[str, Any]) -> Entry:
    """An insert delta as ``(client, counter, n, content, origin)``."""
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


def ranges_of(value: Any) -> list[tuple[int, int, int]]:
    """A delete delta's ``ranges``, each ``(client, first, count)``."""
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


def state_run(entry: Any) -> Run:
    """One ``[client, counter, after, content]`` of a state, as a new run for
    :meth:`RunSeq.load <syncd.crdt.rga.sequence.RunSeq.load>`."""
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
    return Run(client, counter, n, vis, content, origin, NO_BLOCK)
