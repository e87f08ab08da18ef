"""SERVICE_NAMESPACE_MAX_CRDTS holds for creations staged in one loop step:
a WebSocket's run of ops (pipelined op messages) is staged op by op before
its records are appended in one go, and each creation's check read the
store's count, which knew none of the run's earlier ones: six CRDTs created
under a limit of two."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from tests.conftest import ADMIN
from tests.http.support import issue
from tests.ws.support import open_ws, recv, send_mp


async def _usage(url: str, ns: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as c:
        h = await issue(c, ns, admin=True)
        found: dict[str, Any] = (await c.get(f"/v1/namespaces/{ns}/usage", headers=h)).json()
        return found


async def test_a_websocket_run_of_creations_stops_at_the_limit(make_server: Any) -> None:
    server = await make_server(namespace_max_crdts=2)
    async with open_ws(server) as ws:
        for i in range(6):
            body = {"op": "increment"}
            await send_mp(ws, {"kind": "op", "id": f"gc:{i}", "op": body, "ref": i})
        answers: dict[int, str] = {}
        while len(answers) < 6:
            message = await recv(ws)
            if message["kind"] == "ack":
                answers[message["ref"]] = "ack"
            elif message["kind"] == "error":
                answers[message["ref"]] = message["error"]
    assert sorted(answers.values()) == ["ack", "ack"] + ["quota_exceeded"] * 4, answers
    assert (await _usage(server.url, "demo"))["crdts"] == 2


async def test_pipelined_http_creations_up_to_the_limit_all_pass(make_server: Any) -> None:
    """Creations written in one step are counted once (by the store and by
    the step's own count): three pipelined requests under a limit of three."""
    server = await make_server(namespace_max_crdts=3)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = b'{"op":"increment"}'
    request = b"".join(
        b"POST /v1/namespaces/app/crdts/gc:p%d/ops HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (i, ADMIN.encode(), len(body), body)
        for i in range(4)
    )
    writer.write(request)
    received = b""
    statuses: list[int] = []
    async with asyncio.timeout(5):
        while len(statuses) < 4:
            received += await reader.read(65536)
            statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", received)]
    writer.close()
    assert statuses == [200, 200, 200, 403], statuses
    assert (await _usage(server.url, "app"))["crdts"] == 3


async def test_a_websocket_run_of_creations_counts_their_bytes(make_server: Any) -> None:
    """SERVICE_NAMESPACE_MAX_BYTES likewise: the run's new CRDTs were in no
    figure of the store, ten 540-byte registers went in under 2,000 bytes."""
    server = await make_server(namespace_max_bytes=2000)
    async with open_ws(server) as ws:
        for i in range(10):
            body = {"op": "set", "value": "v" * 500}
            await send_mp(ws, {"kind": "op", "id": f"lw:{i}", "op": body, "ref": i})
        answers: dict[int, str] = {}
        while len(answers) < 10:
            message = await recv(ws)
            if message["kind"] in ("ack", "error"):
                answers[message["ref"]] = message.get("error", "ack")
    acked = sum(1 for answer in answers.values() if answer == "ack")
    assert set(answers.values()) == {"ack", "quota_exceeded"}, answers
    usage = await _usage(server.url, "demo")
    assert usage["crdts"] == acked
    assert usage["bytes"] <= 2000, usage
