"""The Hocuspocus endpoint over a real socket, byte by byte: in-band auth per
document, acknowledgements, read-only scope, limits and bad input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Decoder, Doc, Encoder, Text

from syncd.yjs import hocuspocus
from syncd.yjs.protocol import sync_step1, sync_update
from tests.conftest import RunningServer
from tests.http.support import issue

WAIT_S = 5.0


def _string(text: str) -> bytes:
    encoder = Encoder()
    encoder.write_var_string(text)
    return encoder.to_bytes()


def auth(name: str, token: str) -> bytes:
    return _string(name) + b"\x02\x00" + _string(token) + _string("3.4.4")


def on(name: str, message: bytes) -> bytes:
    return _string(name) + message


class Socket:
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def next(self, name: str, kind: int) -> bytes:
        """The body of the next message of ``kind`` for document ``name``."""
        while True:
            data = await asyncio.wait_for(self.ws.recv(), WAIT_S)
            got, got_kind, rest = hocuspocus.parse(data)
            if got == name and got_kind == kind:
                return rest


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def _connect(server: RunningServer) -> Socket:
    return Socket(
        await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/namespaces/app/hocuspocus")
    )


def _token(h: dict[str, str]) -> str:
    return h["authorization"].removeprefix("Bearer ")


def _update(text: str) -> bytes:
    doc: Doc[Any] = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


async def test_auth_sync_update_and_acknowledgement(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    s = await _connect(server)
    await s.ws.send(auth("notes", _token(await issue(client))))
    scope = Decoder(await s.next("notes", 2))
    assert scope.read_var_uint() == 2 and scope.read_var_string() == "read-write"
    await s.next("notes", 0)  # our step 1
    await s.ws.send(on("notes", sync_step1(b"\x00")))
    assert (await s.next("notes", 0))[0] == 1  # step 2
    await s.ws.send(on("notes", sync_update(_update("hello"))))
    assert await s.next("notes", 8) == b"\x01"  # durable
    h = await issue(client)
    r = await client.get("/v1/namespaces/app/crdts/yd:notes?root=content", headers=h)
    assert r.json()["value"] == "hello"
    await s.ws.close()


async def test_two_documents_on_one_socket_and_a_refused_one(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    s = await _connect(server)
    token = _token(await issue(client))
    narrow = _token(await issue(client, client_id=8, read=["yd:a"], write=["yd:a"]))
    await s.ws.send(auth("a", narrow))
    await s.ws.send(auth("b", narrow))  # no read permission on yd:b
    assert (await s.next("a", 2))[0] == 2
    denied = Decoder(await s.next("b", 2))
    assert denied.read_var_uint() == 1 and "forbidden" in denied.read_var_string()
    # Messages for a document not authenticated are dropped; the socket stays.
    await s.ws.send(on("b", sync_update(_update("nope"))))
    await s.ws.send(auth("c", token))
    assert (await s.next("c", 2))[0] == 2
    await s.ws.send(on("c", sync_update(_update("yes"))))
    assert await s.next("c", 8) == b"\x01"
    h = await issue(client)
    assert (await client.get("/v1/namespaces/app/crdts/yd:b", headers=h)).status_code == 404
    await s.ws.close()


async def test_a_read_only_document_acknowledges_updates_as_not_applied(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    s = await _connect(server)
    await s.ws.send(auth("notes", _token(await issue(client, write=[]))))
    scope = Decoder(await s.next("notes", 2))
    assert scope.read_var_uint() == 2 and scope.read_var_string() == "readonly"
    await s.ws.send(on("notes", sync_update(_update("forged"))))
    assert await s.next("notes", 8) == b"\x00"
    h = await issue(client)
    assert (await client.get("/v1/namespaces/app/crdts/yd:notes", headers=h)).status_code == 404
    await s.ws.close()


async def test_a_socket_that_authenticates_nothing_is_closed_1008(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hocuspocus, "AUTH_TIMEOUT_S", 0.2)
    s = await _connect(server)
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(s.ws.recv(), WAIT_S)
    assert s.ws.close_code == 1008


async def test_the_documents_per_connection_limit(
    server: RunningServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hocuspocus, "MAX_DOCUMENTS", 2)
    s = await _connect(server)
    token = _token(await issue(client))
    for name in ("a", "b", "c"):
        await s.ws.send(auth(name, token))
    assert (await s.next("a", 2))[0] == 2 and (await s.next("b", 2))[0] == 2
    denied = Decoder(await s.next("c", 2))
    assert denied.read_var_uint() == 1 and "at most 2" in denied.read_var_string()
    await s.ws.close()


@pytest.mark.parametrize("message", [b"", b"\xff", b"\x05ab", "text", b"\x01a"])
async def test_malformed_messages_close_with_1002(server: RunningServer, message: Any) -> None:
    s = await _connect(server)
    await s.ws.send(message)
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(s.ws.recv(), WAIT_S)
    assert s.ws.close_code == 1002


async def test_an_auth_over_the_rate_limit_waits_instead_of_being_refused(
    make_server: Any,
) -> None:
    """A Hocuspocus provider refused with "permission denied" never asks
    again: a document whose auth met the token's rate limit (a burst of
    requests with the same token, a provider opening several documents)
    stayed unauthenticated for the socket's life, its edits never sent. Over
    the limit the auth waits, as an update does, and the socket is not read
    meanwhile (the provider's step 1 follows its auth)."""
    server: RunningServer = await make_server(rate_limit=3)
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = _token(await issue(client))
        h = {"authorization": f"Bearer {token}"}
        statuses = [
            (await client.get("/v1/namespaces/app/crdts/yd:notes", headers=h)).status_code
            for _ in range(5)
        ]
        assert statuses[-1] == 429
    s = await _connect(server)
    await s.ws.send(auth("notes", token))
    await s.ws.send(on("notes", sync_step1(b"\x00")))
    scope = Decoder(await s.next("notes", 2))
    assert scope.read_var_uint() == 2 and scope.read_var_string() == "read-write"
    # Its step 1, sent right behind the auth, is answered.
    while (await s.next("notes", 0))[0] != 1:
        pass
    await s.ws.close()


async def _scope(s: Socket, name: str) -> tuple[int, str]:
    answer = Decoder(await s.next(name, 2))
    return answer.read_var_uint(), answer.read_var_string()


async def test_a_new_token_for_an_open_document_sets_its_scope(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """A provider that authenticates an open document again (a new token)
    was answered with the old scope, the new token never checked: a token
    narrowed to read-only kept writing. Now the new token decides."""
    s = await _connect(server)
    await s.ws.send(auth("notes", _token(await issue(client))))
    assert await _scope(s, "notes") == (2, "read-write")
    await s.ws.send(auth("notes", _token(await issue(client, write=[]))))
    assert await _scope(s, "notes") == (2, "readonly")
    await s.ws.send(on("notes", sync_update(_update("forged"))))
    assert await s.next("notes", 8) == b"\x00"
    h = await issue(client)
    assert (await client.get("/v1/namespaces/app/crdts/yd:notes", headers=h)).status_code == 404
    # And back: a read-write token writes again.
    await s.ws.send(auth("notes", _token(await issue(client))))
    assert await _scope(s, "notes") == (2, "read-write")
    await s.ws.send(on("notes", sync_update(_update("kept"))))
    assert await s.next("notes", 8) == b"\x01"
    r = await client.get("/v1/namespaces/app/crdts/yd:notes?root=content", headers=h)
    assert r.json()["value"] == "kept"
    await s.ws.close()


async def test_a_refused_new_token_detaches_only_that_document(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    s = await _connect(server)
    token = _token(await issue(client))
    await s.ws.send(auth("a", token))
    await s.ws.send(auth("b", token))
    assert await _scope(s, "a") == (2, "read-write")
    assert await _scope(s, "b") == (2, "read-write")
    only_b = _token(await issue(client, client_id=9, read=["yd:b"], write=["yd:b"]))
    for refused in ("not-a-token", only_b):
        await s.ws.send(auth("a", refused))
        code, reason = await _scope(s, "a")
        assert code == 1 and reason, reason
        await s.ws.send(auth("a", token))  # open again for the next round
        assert await _scope(s, "a") == (2, "read-write")
    await s.ws.send(auth("a", "not-a-token"))
    assert (await _scope(s, "a"))[0] == 1
    # "a" is no longer served: its update is dropped, unacknowledged; "b" goes on.
    await s.ws.send(on("a", sync_update(_update("dropped"))))
    await s.ws.send(on("b", sync_update(_update("yes"))))
    assert await s.next("b", 8) == b"\x01"
    h = await issue(client)
    assert (await client.get("/v1/namespaces/app/crdts/yd:a", headers=h)).status_code == 404
    r = await client.get("/v1/namespaces/app/crdts/yd:b?root=content", headers=h)
    assert r.json()["value"] == "yes"
    await s.ws.close()
