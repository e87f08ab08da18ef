"""How ``POST /v1/admin/backup`` frames its tar: chunked to an HTTP/1.1 client,
so a stream that stops early (the server killed) is an incomplete answer and
not a short body read as whole; up to the close to an HTTP/1.0 client, which
cannot take chunks. And its query: each parameter at most once."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, open_raw, read_until_closed
from tests.http.support import ADMIN_HEADERS, issue, op


def _request(version: str) -> bytes:
    return (
        f"POST /v1/admin/backup HTTP/{version}\r\nHost: x\r\n"
        f"Authorization: Bearer {ADMIN}\r\nContent-Length: 0\r\n\r\n"
    ).encode()


def _split(answer: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


def _dechunk(body: bytes) -> bytes:
    """A chunked body's content; AssertionError unless it ends with its last
    chunk and nothing after it (a plain decoder, not the server's code)."""
    out = bytearray()
    at = 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end], 16)
        at = end + 2
        if size == 0:
            assert body[at:] == b"\r\n", body[at - 10 :]
            return bytes(out)
        out += body[at : at + size]
        assert len(body) >= at + size + 2, "the body stops inside a chunk"
        assert body[at + size : at + size + 2] == b"\r\n"
        at += size + 2


def _names(tar_bytes: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        return tar.getnames()


async def test_http11_gets_the_tar_chunked_with_its_last_chunk(server: Any) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(_request("1.1"))
    answer = await read_until_closed(reader)
    writer.close()
    status, headers, body = _split(answer)
    assert status == "HTTP/1.1 200 OK"
    assert headers["transfer-encoding"] == "chunked"
    assert "content-length" not in headers
    names = _names(_dechunk(body))
    assert names[:3] == ["log", "snapshots", "history"] and names[-1] == "MANIFEST.json"


async def test_http10_gets_the_tar_up_to_the_close(server: Any) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(_request("1.0"))
    answer = await read_until_closed(reader)
    writer.close()
    _, headers, body = _split(answer)
    assert "transfer-encoding" not in headers and "content-length" not in headers
    assert _names(body)[-1] == "MANIFEST.json"


async def test_a_server_killed_mid_backup_is_an_incomplete_answer(spawn_server: Any) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        h = await issue(client)
        for i in range(24):  # some 2.4 MB to copy (log and history): over 2 s at 1 MiB/s
            r = await op(client, h, f"lw:k{i}", {"op": "set", "value": f"{i}" + "x" * 50_000})
            assert r.status_code == 200, r.text
        received = 0
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            async with client.stream(
                "POST", "/v1/admin/backup?max_rate=1", headers=ADMIN_HEADERS
            ) as response:
                assert response.status_code == 200
                async for piece in response.aiter_raw():
                    if not received:
                        server.kill()  # mid-stream: the rate holds the rest back
                    received += len(piece)
        assert 0 < received < 2_000_000


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("admin_token=false&admin_token=true", "admin_token"),
        ("admin_token=false&admin_token=false", "admin_token"),
        ("max_rate=5&admin_token=true&max_rate=50", "max_rate"),
    ],
)
async def test_a_repeated_query_parameter_is_refused(server: Any, query: str, name: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(f"/v1/admin/backup?{query}", headers=ADMIN_HEADERS)
        assert r.status_code == 400
        assert r.json() == {"error": "bad_request", "message": f"{name}: given more than once"}
        # Refused before the backup began: the next one is served.
        r = await client.post("/v1/admin/backup?admin_token=false", headers=ADMIN_HEADERS)
        assert r.status_code == 200
        assert "admin_token" not in _names(r.content)
