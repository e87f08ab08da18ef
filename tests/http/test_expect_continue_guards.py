"""``Expect: 100-continue`` on the routes d31ce4e left unguarded: the backup
(root admin), the DELETE routes (namespace admin, as their handlers check)
and the ops route's query. A request they will refuse whatever its body is
answered before the 100, and the connection closes after it: a token without
the permission (401, 403), over its rate (429), or on the ops route a bad or
repeated ``?origin=`` or ``?return=`` (400), or ``?return=state`` with a
token that may not read the id (403). Before, each got its 100 and its client
uploaded the whole body to be refused. A request they take still gets its
100, then its answer, and counts once against the token's rate."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, open_raw, read_response, read_until_closed
from tests.http.support import ADMIN_HEADERS, issue

OPS = "/v1/namespaces/app/crdts/gc:x/ops"
CRDT = "/v1/namespaces/app/crdts/gc:x"
BACKUP = "/v1/admin/backup"
REVOCATION = "/v1/namespaces/app/revocations/5"
BODY_BYTES = 1_000_000
"""Far more than the server reads ahead: an answer that waited for the body would never come."""


def _head(method: str, target: str, authorization: str | None, length: int = BODY_BYTES) -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    if authorization is not None:
        head += f"Authorization: {authorization}\r\n"
    head += f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
    return head.encode("latin-1")


async def _refused_before_body(
    port: int, method: str, target: str, authorization: str | None
) -> tuple[int, str]:
    """The status and error code answered to a head alone; the connection then ends."""
    reader, writer = await open_raw(port)
    try:
        writer.write(_head(method, target, authorization))
        status, headers, body = await asyncio.wait_for(read_response(reader), 2)
        assert headers["connection"] == "close", (target, status, headers, body)
        writer.write(b"x" * 100_000)  # sent anyway: read and discarded
        writer.write_eof()
        assert await read_until_closed(reader) == b""
        return status, json.loads(body)["error"]
    finally:
        writer.close()


async def _continued(port: int, method: str, target: str, authorization: str, body: bytes) -> int:
    """The status of a request that got its 100 before its body was sent."""
    reader, writer = await open_raw(port)
    try:
        writer.write(_head(method, target, authorization, len(body)))
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n", (target, interim)
        writer.write(body)
        status, _, _ = await asyncio.wait_for(read_response(reader), 5)
        return status
    finally:
        writer.close()


async def test_refused_before_the_100(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer_token = (await issue(client, client_id=4))["authorization"]
        write_only = (await issue(client, client_id=5, read=[]))["authorization"]
        ns_admin = (await issue(client, client_id=6, admin=True))["authorization"]
        other_admin = (await issue(client, ns="other", client_id=7, admin=True))["authorization"]
    cases: list[tuple[str, str, str | None, int, str]] = [
        ("POST", BACKUP, None, 401, "missing_token"),
        ("POST", BACKUP, "Bearer garbage.token", 401, "invalid_token"),
        ("POST", BACKUP, writer_token, 403, "forbidden"),
        ("POST", BACKUP, ns_admin, 403, "forbidden"),
        ("DELETE", CRDT, None, 401, "missing_token"),
        ("DELETE", CRDT, writer_token, 403, "forbidden"),
        ("DELETE", CRDT, other_admin, 403, "forbidden"),
        ("DELETE", REVOCATION, writer_token, 403, "forbidden"),
        ("DELETE", REVOCATION, other_admin, 403, "forbidden"),
        ("POST", OPS + "?origin=", writer_token, 400, "bad_request"),
        ("POST", OPS + "?origin=" + "x" * 129, writer_token, 400, "bad_request"),
        ("POST", OPS + "?origin=a&origin=b", writer_token, 400, "bad_request"),
        ("POST", OPS + "?return=delta", writer_token, 400, "bad_request"),
        ("POST", OPS + "?return=state", write_only, 403, "forbidden"),
        ("POST", OPS + "?origin=ok", None, 401, "missing_token"),
    ]
    for method, target, authorization, status, code in cases:
        answer = await _refused_before_body(server.port, method, target, authorization)
        assert answer == (status, code), (method, target, authorization, answer)


async def test_taken_requests_get_their_100_then_their_answer(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer_token = (await issue(client, client_id=4))["authorization"]
        ns_admin = (await issue(client, client_id=6, admin=True))["authorization"]
    increment = json.dumps({"op": "increment"}).encode()
    assert await _continued(server.port, "POST", OPS + "?origin=ok", writer_token, increment) == 200
    state = OPS + "?return=state&origin=ok"
    assert await _continued(server.port, "POST", state, writer_token, increment) == 200
    assert await _continued(server.port, "DELETE", CRDT, ns_admin, b"{}") == 204
    assert await _continued(server.port, "DELETE", REVOCATION, ns_admin, b"{}") == 404
    root = ADMIN_HEADERS["authorization"]
    reader, writer = await open_raw(server.port)
    try:  # the backup's answer is a chunked tar: its head is enough here
        writer.write(_head("POST", BACKUP, root, 2))
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"{}")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 "), head
    finally:
        writer.close()


@pytest.mark.parametrize("target", [CRDT, REVOCATION], ids=["crdt", "revocation"])
async def test_a_guarded_delete_counts_once_against_the_rate(make_server: Any, target: str) -> None:
    """Four DELETEs under a limit of four all get their 100 and their answer
    (counted twice, the third would be 429), and the fifth is 429 before its 100."""
    srv = await make_server(rate_limit=4)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await client.post(
            "/v1/namespaces/app/tokens",
            json={"client_id": 9, "permissions": {"read": [], "write": [], "admin": True}},
            headers=ADMIN_HEADERS,
        )
        token = "Bearer " + r.json()["token"]
    for _ in range(4):
        assert await _continued(srv.port, "DELETE", target, token, b"{}") == 404
    answer = await _refused_before_body(srv.port, "DELETE", target, token)
    assert answer == (429, "rate_limited")
