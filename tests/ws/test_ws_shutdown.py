"""Graceful shutdown with WebSocket clients: close 1001, presence leaves are durable."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import msgpack
from websockets.asyncio.client import connect

from tests.conftest import ADMIN
from tests.ws.support import NS


async def test_presence_written_over_ws_leaves_on_sigterm(spawn_server: Any) -> None:
    server = spawn_server({"SERVICE_FSYNC": "batch"})
    url = f"ws://127.0.0.1:{server.port}/v1/namespaces/{NS}/ws?token={ADMIN}"
    async with connect(url, proxy=None, compression=None, ping_interval=None) as ws:
        await ws.send(
            msgpack.packb(
                {
                    "kind": "op",
                    "id": "pr:room",
                    "ref": 1,
                    "op": {"op": "update", "data": {"n": 1}, "ttl_ms": 300000},
                }
            )
        )
        ack = msgpack.unpackb(await asyncio.wait_for(ws.recv(), 5))
        assert ack["kind"] == "ack" and ack["ref"] == 1
        stopping = asyncio.get_running_loop().run_in_executor(None, server.terminate)
        closed = await asyncio.wait_for(ws.wait_closed(), 10)
        assert closed is None
        assert ws.close_code == 1001
        assert await stopping == 0
    restarted = spawn_server({"SERVICE_FSYNC": "batch"}, port=server.port)
    req = urllib.request.Request(
        f"{restarted.url}/v1/namespaces/{NS}/crdts/pr:room",
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        body = json.load(resp)
    assert body["value"] == {} and body["seq"] == 2
