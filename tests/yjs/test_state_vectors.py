"""A peer's step 1 whose state vector claims more clients than it holds.

Yrs decodes a state vector into a hash map sized, before reading any entry,
by the count at its head: ten bytes claiming 2**29 clients made the server
allocate about 1 GB and spend 0.7 s of its event loop on each such message
before refusing it (a few at once, or a container's memory limit, and the
server is gone). A step 1 is now read as lib0 writes it (a count, then as
many client and clock pairs), and one that does not hold what it claims is
a malformed message: closed 1002, never handed to Yrs.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Doc, Encoder, Text, create_sync_message

from syncd.crdt.ydoc import b64
from syncd.ws.framing import CLOSE_PROTOCOL_ERROR
from syncd.yjs.protocol import SendDiff, YjsSession, sync_step1
from tests.conftest import RunningServer
from tests.http.support import issue, op

HUGE_COUNT = bytes.fromhex("8080808002")  # 2**29 clients, as a var-uint
CLAIMING = HUGE_COUNT + bytes.fromhex("ff00020001")
"""A state vector of ten bytes claiming 2**29 clients (Yrs: 1 GB, 0.7 s)."""


class Recorder:
    def __init__(self) -> None:
        self.actions: list[Any] = []
        self.closes: list[tuple[int, str]] = []
        self.session = YjsSession(self.actions.append, self, writable=True)

    def close(self, code: int, reason: str = "") -> None:
        self.closes.append((code, reason))


@pytest.mark.parametrize(
    "state_vector",
    [CLAIMING, HUGE_COUNT, b"\x02\x01\x01", b"", b"\x01\x80"],
)
def test_a_state_vector_that_does_not_hold_its_count_is_malformed(state_vector: bytes) -> None:
    recorder = Recorder()
    recorder.session.receive(sync_step1(state_vector))
    assert recorder.actions == []
    ((code, _),) = recorder.closes
    assert code == CLOSE_PROTOCOL_ERROR


def test_real_state_vectors_are_answered() -> None:
    doc: Doc[Any] = Doc()
    doc.get("t", type=Text).insert(0, "hi")
    other: Doc[Any] = Doc()
    other.get("t", type=Text).insert(0, "yo")
    doc.apply_update(other.get_update())
    for state_vector in (b"\x00", doc.get_state(), doc.get_state() + b"trailing"):
        recorder = Recorder()
        recorder.session.receive(sync_step1(state_vector))
        assert recorder.actions == [SendDiff(state_vector)] and recorder.closes == []
    recorder = Recorder()
    recorder.session.receive(create_sync_message(doc))
    assert recorder.actions == [SendDiff(doc.get_state())]


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def test_a_claiming_step1_is_refused_without_the_allocation(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    headers = await issue(client)
    token = headers["authorization"].removeprefix("Bearer ")
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, "there is a document to answer from")
    r = await op(client, headers, "yd:notes", {"op": "update", "update": b64(doc.get_update())})
    assert r.status_code == 200, r.text
    peak = _peak_mb()
    for path in (f"yjs/notes?token={token}", "hocuspocus"):
        ws: Any = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/app/{path}")
        message = sync_step1(CLAIMING)
        if path == "hocuspocus":
            encoder = Encoder()
            encoder.write_var_string("notes")
            name = encoder.to_bytes()
            encoder.write_var_uint(2)
            encoder.write_var_uint(0)
            encoder.write_var_string(token)
            await ws.send(encoder.to_bytes())
            message = name + message
        await ws.send(message)
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1002
    # The server (this process) never held the 1 GB the count asked for.
    assert _peak_mb() - peak < 256, f"peak memory grew by {_peak_mb() - peak:.0f} MB"
    r = await client.get("/v1/namespaces/app/crdts/yd:notes?root=content", headers=headers)
    assert r.json()["value"] == "there is a document to answer from"
