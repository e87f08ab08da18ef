"""A revocation without ``before_ms`` refuses every token issued before it was
asked for, even one issued in the same millisecond, and none issued after
its answer (docs/permissions.md#revoking-tokens), on a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.conftest import ADMIN, RunningServer

ROUNDS = 20
"""Issue-then-revoke pairs: without the fix about three in four tokens
issued in the revocation's millisecond outlived it, so 20 rounds all refused
by chance is out of the question."""


def _post(path: str, body: dict[str, Any], *, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ADMIN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode() + data


async def _pipelined(server: RunningServer, *requests: bytes) -> list[Any]:
    """Send the requests at once on one connection (the server answers them
    in order, each after the one before) and return the JSON bodies."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(requests))
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    bodies = []
    for part in raw.split(b"HTTP/1.1 ")[1:]:
        status, _, rest = part.partition(b" ")
        assert status == b"200", part
        bodies.append(json.loads(rest.partition(b"\r\n\r\n")[2]))
    return bodies


async def test_a_token_issued_just_before_a_revocation_is_refused(server: RunningServer) -> None:
    tokens = "/v1/namespaces/app/tokens"
    revocations = "/v1/namespaces/app/revocations"
    async with httpx.AsyncClient(base_url=server.url) as client:
        for client_id in range(1, ROUNDS + 1):
            permissions = {"client_id": client_id, "permissions": {"read": ["*"]}}
            before, revocation, after = await _pipelined(
                server,
                _post(tokens, permissions),
                _post(revocations, {"client_id": client_id}),
                _post(tokens, permissions, close=True),
            )
            assert revocation["before_ms"] == revocation["revoked_at"]
            refused = await client.get(
                "/v1/namespaces/app/tokens/me",
                headers={"authorization": f"Bearer {before['token']}"},
            )
            assert refused.status_code == 401, (revocation, refused.json())
            assert refused.json()["error"] == "token_revoked"
            new = await client.get(
                "/v1/namespaces/app/tokens/me",
                headers={"authorization": f"Bearer {after['token']}"},
            )
            assert new.status_code == 200, (revocation, new.json())
            assert new.json()["issued_at"] >= revocation["before_ms"]
