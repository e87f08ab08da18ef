"""``Expect: 100-continue`` with a token the route will refuse (RFC 9110
10.1.1: a server may send the final status instead of the 100): a missing,
malformed, badly signed or expired token is answered 401, a token of another
namespace or without the route's permission 403, at once and before any body
byte is sent; the connection closes after it (the body the client may send
anyway is discarded). Before, the server sent ``100 Continue`` whatever the
token, and the client uploaded its whole body to learn it was refused. A
token the route takes still gets its 100, then its answer (both parsers)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.conftest import RunningServer, open_raw, read_response, read_until_closed
from tests.http.support import ADMIN_HEADERS, issue

OPS = "/v1/namespaces/app/crdts/gc:x/ops"
RESTORE = "/v1/namespaces/app/crdts/gc:x/restore"
REVERT = "/v1/namespaces/app/crdts/gc:x/revert"
NS_TOKENS = "/v1/namespaces/app/tokens"
AGENT_TOKENS = "/v1/tokens"
REVOCATIONS = "/v1/namespaces/app/revocations"
BODY_BYTES = 1_000_000
"""Far more than the server reads ahead: an answer that waited for the body would never come."""


def _head(target: str, authorization: str | None, length: int = BODY_BYTES) -> bytes:
    head = f"POST {target} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    if authorization is not None:
        head += f"Authorization: {authorization}\r\n"
    head += f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
    return head.encode("latin-1")


async def _refused_before_body(port: int, target: str, authorization: str | None) -> bytes:
    """The final answer to a head alone, and that the connection then ends."""
    reader, writer = await open_raw(port)
    try:
        writer.write(_head(target, authorization))
        status, headers, body = await asyncio.wait_for(read_response(reader), 2)
        assert headers["connection"] == "close", (target, status, headers)
        # The body it sends anyway is read and discarded; then the connection ends.
        writer.write(b"x" * 100_000)
        writer.write_eof()
        assert await read_until_closed(reader) == b""
        return b"%d " % status + body
    finally:
        writer.close()


async def test_a_refused_token_is_answered_before_its_100(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        expired = (await issue(client, client_id=1, ttl_ms=1))["authorization"]
        other_ns = (await issue(client, ns="other", client_id=2))["authorization"]
        read_only = (await issue(client, client_id=3, write=[]))["authorization"]
        writer_token = (await issue(client, client_id=4))["authorization"]
    await asyncio.sleep(0.01)  # past the 1 ms token's expiry
    cases = [
        (OPS, None, 401, "missing_token"),
        (OPS, "Basic YTpi", 401, "invalid_token"),
        (OPS, "Bearer garbage.token", 401, "invalid_token"),
        (OPS, expired, 401, "token_expired"),
        (OPS, other_ns, 403, "forbidden"),
        (OPS, read_only, 403, "forbidden"),
        (RESTORE, read_only, 403, "forbidden"),
        (REVERT, None, 401, "missing_token"),
        (REVERT, read_only, 403, "forbidden"),
        (NS_TOKENS, writer_token, 403, "forbidden"),
        (AGENT_TOKENS, writer_token, 403, "forbidden"),
        (AGENT_TOKENS, None, 401, "missing_token"),
        (REVOCATIONS, writer_token, 403, "forbidden"),
    ]
    for target, authorization, status, code in cases:
        answer = await _refused_before_body(server.port, target, authorization)
        got_status, _, body = answer.partition(b" ")
        case = (target, authorization, answer)
        assert int(got_status) == status and json.loads(body)["error"] == code, case


async def test_a_taken_token_gets_its_100_then_its_answer(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer_token = (await issue(client, client_id=4))["authorization"]
    body = json.dumps({"op": "increment"}).encode()
    for authorization in (writer_token, ADMIN_HEADERS["authorization"]):
        reader, writer = await open_raw(server.port)
        try:
            writer.write(_head(OPS, authorization, len(body)))
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(body)
            status, headers, answer = await asyncio.wait_for(read_response(reader), 5)
            assert status == 200 and "connection" not in headers, answer
        finally:
            writer.close()


async def test_a_token_that_expires_during_the_upload_is_refused(server: RunningServer) -> None:
    """The guard's principal is checked again once the body has come."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        soon = (await issue(client, client_id=5, ttl_ms=1500))["authorization"]
    body = json.dumps({"op": "increment"}).encode()
    reader, writer = await open_raw(server.port)
    try:
        writer.write(_head(OPS, soon, len(body)))
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        await asyncio.sleep(1.6)
        writer.write(body)
        status, _, answer = await asyncio.wait_for(read_response(reader), 5)
        assert status == 401 and json.loads(answer)["error"] == "token_expired", answer
    finally:
        writer.close()


async def test_a_guarded_request_counts_once_against_the_rate(make_server: Any) -> None:
    """The guard authenticates (counting the rate) and the handler takes its
    principal: four requests under a limit of four all get their 100 and
    their 200 (counted twice, the third would be refused), and the fifth is
    told 429 before its 100."""
    srv = await make_server(rate_limit=4)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        r = await client.post(
            "/v1/namespaces/app/tokens",
            json={"client_id": 9, "permissions": {"read": ["*"], "write": ["*"]}},
            headers=ADMIN_HEADERS,
        )
        token = "Bearer " + r.json()["token"]
    body = json.dumps({"op": "increment"}).encode()
    reader, writer = await open_raw(srv.port)
    try:
        for _ in range(4):
            writer.write(_head(OPS, token, len(body)))
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(body)
            status, _, answer = await asyncio.wait_for(read_response(reader), 5)
            assert status == 200, answer
    finally:
        writer.close()
    answer = await _refused_before_body(srv.port, OPS, token)
    assert answer.startswith(b"429 ") and json.loads(answer[4:])["error"] == "rate_limited", answer
