"""The SSE event bound (MAX_EVENT_BYTES) leaves room for the largest snapshot
the server sends at its default limits: a CRDT's state may reach
SERVICE_MAX_CRDT_BYTES (64 MiB, DEFAULT_MAX_CRDT_BYTES), a Yjs document's by
a sixteenth more (DELETION_HEADROOM_DIVISOR), and its snapshot event is that
state in base64, 4 bytes per 3. The bound was 64 MiB, the limit's bytes: a
CRDT near the limit, which the server held and served, ended every stream of
it with MessageTooLargeError. Filling a CRDT to 64 MiB takes minutes, so the
end-to-end case is a server with a small SERVICE_MAX_CRDT_BYTES and a bound
in the same ratio. The WebSocket's bound (MAX_MESSAGE_BYTES) is the same."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from syncd.client import AsyncClient
from syncd.client.errors import MessageTooLargeError, ServiceError
from syncd.client.sse import MAX_EVENT_BYTES
from syncd.client.stream import MAX_MESSAGE_BYTES
from syncd.quotas import DEFAULT_MAX_CRDT_BYTES, DELETION_HEADROOM_DIVISOR
from tests.client.conftest import NS, make_token
from tests.client.test_client_stream import take

BYTES_PER_LIMIT_BYTE = 2
"""The ratio of MAX_EVENT_BYTES to the server's default SERVICE_MAX_CRDT_BYTES."""

SMALL_LIMIT = 256 * 1024
"""The server's SERVICE_MAX_CRDT_BYTES in the end-to-end case: a few ops fill it."""

ELEMENT_CHARS = 60_000
"""Characters of each element (a set element is at most 64 KiB as JSON)."""

MAX_ELEMENTS = 64
"""More adds than SMALL_LIMIT can hold: a server that never refuses fails the test."""


def test_the_bound_holds_a_snapshot_at_the_default_limit_in_base64() -> None:
    assert MAX_EVENT_BYTES == BYTES_PER_LIMIT_BYTE * DEFAULT_MAX_CRDT_BYTES
    largest_state = DEFAULT_MAX_CRDT_BYTES + DEFAULT_MAX_CRDT_BYTES // DELETION_HEADROOM_DIVISOR
    assert math.ceil(largest_state / 3) * 4 < MAX_EVENT_BYTES, "base64 of the largest state fits"
    # A WebSocket snapshot carries the state as msgpack bytes: the same bound holds it.
    assert MAX_MESSAGE_BYTES == MAX_EVENT_BYTES


async def _fill_to_limit(client: AsyncClient, crdt_id: str) -> int:
    """Add elements until the server refuses one more (413 crdt_too_large); the number added."""
    for n in range(MAX_ELEMENTS):
        element = f"{n:08d}" + "x" * ELEMENT_CHARS
        try:
            await client.orset_add(crdt_id, element)
        except ServiceError as exc:
            assert (exc.status, exc.code) == (413, "crdt_too_large")
            return n
    raise AssertionError(f"{MAX_ELEMENTS} elements and no 413")


@pytest.mark.parametrize("via", ["sse", "ws"])
async def test_a_crdt_at_the_server_limit_streams_with_a_bound_in_that_ratio(
    make_server: Callable[..., Any], via: str
) -> None:
    server = await make_server(max_crdt_bytes=SMALL_LIMIT)
    async with AsyncClient(server.url, make_token(63), NS) as client:
        added = await _fill_to_limit(client, "or:full")
        assert added >= 3, added
        roomy = BYTES_PER_LIMIT_BYTE * SMALL_LIMIT
        opened = (
            client.events("or:full", max_event_bytes=roomy)
            if via == "sse"
            else client.subscribe(["or:full"], max_message_bytes=roomy)
        )
        async with opened as stream:
            (snapshot,) = await take(stream, 1)
            assert snapshot["kind"] == "snapshot" and snapshot["seq"] == added
            assert stream.connects == 1


async def test_a_bound_of_the_limits_bytes_refuses_the_snapshot(
    make_server: Callable[..., Any],
) -> None:
    """The old ratio, one byte of event per byte of the limit: a snapshot of a
    full CRDT, in base64, is past it."""
    server = await make_server(max_crdt_bytes=SMALL_LIMIT)
    async with AsyncClient(server.url, make_token(63), NS) as client:
        await _fill_to_limit(client, "or:full")
        stream = client.events("or:full", max_event_bytes=SMALL_LIMIT)
        with pytest.raises(MessageTooLargeError):
            await take(stream, 1)
        assert stream.connects == 1  # not asked again
