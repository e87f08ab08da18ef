"""HEAD on the SSE route: the head a GET gets, without building the stream's
first event (a snapshot of a large CRDT would be encoded for nothing)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import RunningServer, open_raw, read_until_closed
from tests.http.support import issue, op

DOC = "rg:head"
TEXT = 400_000
"""Characters of the CRDT: a snapshot well worth not building."""


def _head_lines(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip() for ln in lines[1:]}
    headers.pop("date", None)
    return lines[0], headers, body


async def _ask(server: RunningServer, method: str, auth: str) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await open_raw(server.port)
    writer.write(
        f"{method} /v1/namespaces/app/crdts/{DOC}/events HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: {auth}\r\n\r\n".encode()
    )
    if method == "HEAD":
        raw = await read_until_closed(reader, timeout=10)
    else:
        raw = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    return _head_lines(raw)


async def test_head_on_events_answers_gets_head_without_building_the_snapshot(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server(max_body_bytes=2 * TEXT)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        headers = await issue(client)
        r = await op(client, headers, DOC, {"op": "insert", "index": 0, "text": "x" * TEXT})
        assert r.status_code == 200, r.text
    engine = server.app.engine
    built: list[str] = []
    snapshot_delta = engine.snapshot_delta

    def counting(ns: str, crdt_id: str) -> dict[str, Any]:
        built.append(crdt_id)
        return snapshot_delta(ns, crdt_id)

    engine.snapshot_delta = counting  # type: ignore[method-assign]
    streams = server.app.metrics.sse_connections_active
    status, head_headers, body = await _ask(server, "HEAD", headers["authorization"])
    assert body == b""
    assert built == []
    assert server.app.hub.count == 0
    assert streams._value.get() == 0
    get_status, get_headers, _ = await _ask(server, "GET", headers["authorization"])
    assert (status, head_headers) == (get_status, get_headers)
    assert status.startswith("HTTP/1.1 200")
    assert built == [DOC]


async def test_head_on_events_is_refused_as_get_is(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        other = await issue(client, read=["gc:*"])
    for auth in (other["authorization"], "Bearer nonsense"):
        head = await _ask_refusal(server, "HEAD", auth)
        get = await _ask_refusal(server, "GET", auth)
        assert head[:2] == get[:2]
        assert head[2] == b""


async def _ask_refusal(
    server: RunningServer, method: str, auth: str
) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await open_raw(server.port)
    writer.write(
        f"{method} /v1/namespaces/app/crdts/{DOC}/events HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: {auth}\r\nConnection: close\r\n\r\n".encode()
    )
    raw = await read_until_closed(reader, timeout=10)
    writer.close()
    status, headers, body = _head_lines(raw)
    if method == "GET":
        body = b""
    return status, headers, body
