"""A root admin secret that is not ASCII (docs/permissions.md#the-root-admin)
works on a real server: in the ``Authorization`` header as its UTF-8 bytes,
in ``?token=`` percent-encoded, and set in the environment as bytes that are
not UTF-8 at all.

Found by probing: headers are decoded one byte per character (latin-1) and
the secret was compared with that text encoded as UTF-8, so the right secret
in the header got 401 ``invalid_token`` (while ``?token=`` took it); and a
``SERVICE_ADMIN_TOKEN`` that is not UTF-8 stopped the start with a
UnicodeEncodeError traceback."""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx

SECRET = "pässwört-geheim-1234"
RAW_SECRET = b"admin-\xff\xfe-not-utf8-secret"


def issue_body() -> dict[str, Any]:
    return {"client_id": 1, "permissions": {"read": ["*"]}}


async def test_a_non_ascii_secret_works_in_the_header_and_the_query(make_server: Any) -> None:
    server = await make_server(admin_token=SECRET)
    async with httpx.AsyncClient(base_url=server.url) as client:
        header = {"authorization": f"Bearer {SECRET}".encode()}  # its UTF-8 bytes, as curl sends
        r = await client.post("/v1/namespaces/app/tokens", json=issue_body(), headers=header)
        assert r.status_code == 200, r.text
        r = await client.get("/v1/namespaces/app/tokens/me", headers=header)
        assert r.json() == {"admin": True, "root": True}
        async with client.stream(
            "GET", "/v1/namespaces/app/crdts/gc:x/events", params={"token": SECRET}
        ) as r:
            assert r.status_code == 200
        # A near miss is still refused, in either place.
        wrong = {"authorization": f"Bearer {SECRET[:-1]}x".encode()}
        r = await client.get("/v1/namespaces/app/tokens/me", headers=wrong)
        assert r.status_code == 401, r.text
        r = await client.get(
            "/v1/namespaces/app/crdts/gc:x/events", params={"token": SECRET[:-1] + "x"}
        )
        assert r.status_code == 401, r.text


def raw_get(port: int, authorization: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(
            b"GET /v1/namespaces/app/tokens/me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Authorization: " + authorization + b"\r\n\r\n"
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


async def test_a_secret_that_is_not_utf8_starts_and_matches_its_bytes(spawn_server: Any) -> None:
    # As the environment holds it (subprocess encodes it back to these bytes).
    server = spawn_server({"SERVICE_ADMIN_TOKEN": os.fsdecode(RAW_SECRET)})
    answer = raw_get(server.port, b"Bearer " + RAW_SECRET)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert answer.endswith(b'{"admin":true,"root":true}'), answer
    answer = raw_get(server.port, b"Bearer " + RAW_SECRET[:-1])
    assert answer.startswith(b"HTTP/1.1 401"), answer
    assert server.terminate() == 0, server.log()
