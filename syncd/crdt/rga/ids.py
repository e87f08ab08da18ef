"""Element ids of the rga type: ``"<counter>@<client_id>"`` strings on the wire.

Inside the type an id is the pair ``(client, counter)``; deltas carry ids as
run-length ranges ``[client, first_counter, count]`` so that deleting ten
thousand characters is a few small lists, not ten thousand strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from syncd.errors import invalid_op

MAX_ID_CHARS = 48
"""Longer than any id this service makes (two 64-bit integers and an ``@``);
refusing longer strings before ``int()`` keeps parsing cheap."""

_DIGITS = frozenset("0123456789")


def format_id(client: int, counter: int) -> str:
    return f"{counter}@{client}"


def _decimal(text: str, signed: bool) -> int | None:
    body = text[1:] if signed and text.startswith("-") else text
    if not body or not _DIGITS.issuperset(body):
        return None
    if len(body) > 1 and body[0] == "0":
        # One spelling per id, so "07@1" cannot name the element "7@1".
        return None
    return int(text)


def parse_id(value: Any, field: str) -> tuple[int, int]:
    """``"<counter>@<client>"`` -> ``(client, counter)``; anything else is invalid_op."""
    if type(value) is not str or len(value) > MAX_ID_CHARS:
        raise invalid_op(f"{field}: must be an element id string '<counter>@<client_id>'")
    counter_text, sep, client_text = value.partition("@")
    counter = _decimal(counter_text, signed=False)
    client = _decimal(client_text, signed=True)
    if not sep or counter is None or client is None or counter < 1:
        raise invalid_op(f"{field}: must be an element id string '<counter>@<client_id>'")
    return client, counter


def rle_ids(ids: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Sorted, deduplicated ``(client, counter)`` pairs as ``[client, first, count]`` ranges."""
    ranges: list[list[int]] = []
    last: list[int] | None = None
    for client, counter in sorted(set(ids)):
        if last is not None and last[0] == client and last[1] + last[2] == counter:
            last[2] += 1
        else:
            last = [client, counter, 1]
            ranges.append(last)
    return ranges
