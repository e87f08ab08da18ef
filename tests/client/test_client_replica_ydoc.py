"""A Yjs document's client replica says what the server says while an update
waits for its dependency: its ``state()`` is ``read_state``'s (the waiting
update merged in and listed: syncd.crdt.engine.replica_state) and its
``view()`` is ``read``'s, as the other types' replicas do
(tests/client/test_client_replica.py's ``_converged``).

``Replica.state()`` gave the integrated document alone, so a replica that
handed its state on (to another replica, to a store) lost the waiting update
there. Real server, real sockets.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from syncd.client import AsyncClient, Replica
from syncd.crdt.ydoc import YDoc, root_view
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer
from tests.yjs.test_pending_subscribers import ID, WAIT_S, _b64, _waiting, _write


async def _same_as_server(replica: Replica, reader: AsyncClient) -> dict[str, Any]:
    full = await reader.read_state(ID)
    assert full is not None
    await replica.wait_for_seq(full["seq"], WAIT_S)
    assert replica.state() == full["state"]
    assert replica.view() == await reader.read(ID)
    return full


def _content(replica: Replica) -> str:
    assert isinstance(replica.crdt, YDoc)
    text: str = root_view(replica.crdt.encoded(), "content", "text")
    return text


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_ydoc_replica_state_is_the_server_state_while_an_update_waits(
    server: RunningServer, via: str
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers, first = await _waiting(client)
        async with (
            AsyncClient(server.url, make_token(3), NS) as reader,
            await reader.replica(ID, via=via) as replica,
        ):
            full = await _same_as_server(replica, reader)
            assert full["state"]["pending"]  # it waits, and the state says so
            assert _content(replica) == ""
            # The state handed on loads as a replica that integrates it too.
            loaded = YDoc.from_state(replica.state())
            loaded.apply_delta({"op": "update", "update": _b64(first)})
            assert root_view(loaded.encoded(), "content", "text") == "hello world"

            assert await _write(client, headers, first) == 2
            full = await _same_as_server(replica, reader)
            assert list(full["state"]) == ["update"]  # nothing waits any more
            assert _content(replica) == "hello world"
