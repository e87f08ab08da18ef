"""The event stream refuses a parameter it takes (``token``, ``since``,
``epoch``) given twice, as the read, ``/history``, the listing and the backup
do: a proxy or log filter may have checked the one copy and the server used
the other. A parameter it does not take may repeat (a cache buster)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

EVENTS = "/v1/namespaces/app/crdts/gc:visits/events"


async def _answer(port: int, target: str, headers: dict[str, str]) -> tuple[int, Any]:
    """The status of ``GET target`` and, when it is not the stream, its JSON body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{head}\r\n".encode()
        )
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {
            ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip() for ln in lines[1:] if ln
        }
        if status == 200:
            assert fields["content-type"].startswith("text/event-stream")
            return status, None
        body = await reader.readexactly(int(fields["content-length"]))
        return status, json.loads(body)
    finally:
        writer.close()


@pytest.fixture
async def token(server: RunningServer) -> str:
    async with httpx.AsyncClient(base_url=server.url) as client:
        headers = await issue(client)
        assert (await op(client, headers, "gc:visits", {"op": "increment"})).status_code == 200
    return headers["authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("token={t}&token=bogus", "token"),
        ("token=bogus&token={t}", "token"),
        ("token={t}&token={t}", "token"),  # the same twice: still refused
        ("token={t}&since=0&since=1", "since"),
        ("token={t}&since=1&epoch=a&epoch=b", "epoch"),
        ("token={t}&since=1&token=bogus&epoch=e", "token"),
    ],
)
async def test_repeated_parameter_is_400(
    server: RunningServer, token: str, query: str, name: str
) -> None:
    status, body = await _answer(server.port, f"{EVENTS}?{query.format(t=token)}", {})
    assert status == 400
    assert body["error"] == "bad_request"
    assert body["message"] == f"{name}: given more than once"


async def test_repeated_query_token_is_400_beside_a_header(
    server: RunningServer, token: str
) -> None:
    # The header wins over ?token=, but two of them still mean a URL some
    # filter may have read differently: refused, not silently ignored.
    status, body = await _answer(
        server.port, f"{EVENTS}?token=a&token=b", {"Authorization": f"Bearer {token}"}
    )
    assert (status, body["message"]) == (400, "token: given more than once")


async def test_single_parameters_and_repeated_unknown_ones_still_stream(
    server: RunningServer, token: str
) -> None:
    for query in (f"token={token}", f"token={token}&since=0&_=1&_=2"):
        status, _ = await _answer(server.port, f"{EVENTS}?{query}", {})
        assert status == 200, query
