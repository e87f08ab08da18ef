"""Restore and revert check the write permission on the id before what the
body's fields say, as the ops route does (docs/http-api.md, "Applying ops":
the body's JSON (400), then the write permission (403), then the fields
(400)): a token that may not write the id is 403 whatever the fields hold,
the same with ``Expect: 100-continue`` as without. Before, a bad field was
400 without Expect and 403 with it (the route's guard answers before the 100,
before any body byte has come). A token that may write gets the fields' 400
either way (after its 100). Both parsers, on a real socket."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.conftest import RunningServer, open_raw, read_response, read_until_closed
from tests.http.support import ADMIN_HEADERS, issue

CRDT = "/v1/namespaces/app/crdts/gc:x"
ROUTES: list[tuple[str, str, bytes]] = [
    # (id, route, a body whose fields are refused whatever the token may do)
    ("restore", CRDT + "/restore", b'{"seq": -1}'),
    ("restore not an object", CRDT + "/restore", b"[1]"),
    ("revert", CRDT + "/revert", b'{"since_seq": 1}'),
    ("revert unknown field", CRDT + "/revert", b'{"client_id": 1, "x": 2}'),
    ("ops", CRDT + "/ops", b"[]"),
]


def _request(target: str, authorization: str, body: bytes, expect: bool) -> bytes:
    head = f"POST {target} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    head += f"Authorization: {authorization}\r\nContent-Length: {len(body)}\r\n"
    if expect:
        head += "Expect: 100-continue\r\n"
    return (head + "\r\n").encode("latin-1") + body


async def _answer(port: int, request: bytes, wait_for_100: bool) -> tuple[int, str]:
    """The status and error code of the final answer to ``request``: its head
    first and, after a 100 (which must come when ``wait_for_100``), its body;
    else the whole request in one write."""
    reader, writer = await open_raw(port)
    try:
        if wait_for_100:
            cut = request.index(b"\r\n\r\n") + 4
            writer.write(request[:cut])
            status, headers, body = await asyncio.wait_for(read_response(reader), 5)
            if status == 100:
                writer.write(request[cut:])
                status, headers, body = await asyncio.wait_for(read_response(reader), 5)
            else:
                assert headers["connection"] == "close", headers  # refused before the body
        else:
            writer.write(request)
            status, headers, body = await asyncio.wait_for(read_response(reader), 5)
        writer.write_eof()
        assert await read_until_closed(reader) == b""  # nothing more was answered
        return status, json.loads(body)["error"]
    finally:
        writer.close()


@pytest.mark.parametrize(("target", "body"), [r[1:] for r in ROUTES], ids=[r[0] for r in ROUTES])
async def test_a_token_that_may_not_write_is_403_whatever_the_fields_with_or_without_expect(
    server: RunningServer, target: str, body: bytes
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        read_only = (await issue(client, client_id=3, write=[]))["authorization"]
        other_id = (await issue(client, client_id=4, write=["gc:y"]))["authorization"]
    admin = ADMIN_HEADERS["authorization"]
    for token, expected in ((read_only, 403), (other_id, 403), (admin, 400)):
        answers = {
            "without Expect": await _answer(
                server.port, _request(target, token, body, False), False
            ),
            "Expect": await _answer(server.port, _request(target, token, body, True), True),
        }
        code = "forbidden" if expected == 403 else "bad_request"
        assert set(answers.values()) == {(expected, code)}, (token[:20], answers)
