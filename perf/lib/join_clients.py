"""Many native WebSocket or SSE clients starting from one large CRDT at once:
the load of :mod:`perf.studies.join_storm` for those kinds.

Run as ``python -m perf.lib.join_clients CONFIG_JSON``. The process waits for
a line on its standard input, then opens ``joiners`` connections at once,
each started the way a client with nothing starts:

- ``ws``: the native WebSocket upgrade, then ``subscribe`` to the CRDT;
- ``sse``: ``GET .../crdts/ID/events``;

and reads each one's first message, the snapshot, whole. Then it prints one
JSON line: how many started, how many snapshots held the expected seq and
state (``expected``: the CRDT's ``?format=crdt`` read, taken by the study
before the storm), and when the first, the median and the last arrived.

CONFIG_JSON: ``{"kind": "ws"|"sse", "port", "ns", "id", "token", "joiners",
"expected": path of the JSON read, "hold_ms": how long each client reads
nothing once it has asked, as a peer on a slow link}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any, Final, cast

import msgpack
import uvloop

START_TIMEOUT_S: Final = 300.0
"""Every snapshot must have arrived by then, or the run fails loudly."""
READ_BYTES: Final = 1 << 16


def _frame(payload: bytes) -> bytes:
    """A masked, final binary client frame."""
    mask = os.urandom(4)
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x82, 0x80 | length)
    elif length < 65536:
        head = struct.pack("!BBH", 0x82, 0x80 | 126, length)
    else:
        head = struct.pack("!BBQ", 0x82, 0x80 | 127, length)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + body


async def _hold(writer: asyncio.StreamWriter, config: dict[str, Any]) -> None:
    """Read nothing for ``hold_ms``, as a peer on a slow link."""
    hold_s = config.get("hold_ms", 0) / 1000
    if hold_s:
        transport = cast(asyncio.Transport, writer.transport)  # a socket's: it reads too
        transport.pause_reading()
        await asyncio.sleep(hold_s)
        transport.resume_reading()


async def _head(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if status not in (101, 200):
        raise RuntimeError(f"status {status}")


Started = tuple[dict[str, Any], asyncio.StreamWriter]
"""The snapshot a client started from, and its connection (closed at the end)."""


async def _ws(config: dict[str, Any]) -> Started:
    reader, writer = await asyncio.open_connection("127.0.0.1", config["port"])
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET /v1/namespaces/{config['ns']}/ws?token={config['token']} HTTP/1.1\r\n"
        f"Host: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n\r\n".encode()
    )
    await _head(reader)
    writer.write(_frame(msgpack.packb({"kind": "subscribe", "id": config["id"]})))
    await _hold(writer, config)
    while True:
        first, second = await reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await reader.readexactly(8))
        payload = await reader.readexactly(length)
        if first & 0x0F == 0x2:
            message: dict[str, Any] = msgpack.unpackb(payload)
            if message.get("kind") == "snapshot":
                return message, writer


async def _sse(config: dict[str, Any]) -> Started:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", config["port"], limit=64 * 1024 * 1024
    )
    writer.write(
        f"GET /v1/namespaces/{config['ns']}/crdts/{config['id']}/events HTTP/1.1\r\n"
        f"Host: bench\r\nAuthorization: Bearer {config['token']}\r\n\r\n".encode()
    )
    await _hold(writer, config)
    await _head(reader)
    while True:
        block = await reader.readuntil(b"\n\n")
        if block.startswith(b"data: "):
            message: dict[str, Any] = msgpack.unpackb(base64.b64decode(block[6:-2]))
            return message, writer


async def storm(config: dict[str, Any]) -> dict[str, Any]:
    expected = json.loads(Path(config["expected"]).read_text())
    start = _ws if config["kind"] == "ws" else _sse
    started = time.perf_counter()
    times: list[float] = []

    async def one() -> Started:
        result = await start(config)
        times.append(time.perf_counter() - started)
        return result

    results = await asyncio.wait_for(
        asyncio.gather(*(one() for _ in range(config["joiners"])), return_exceptions=True),
        START_TIMEOUT_S,
    )
    got = [r for r in results if isinstance(r, tuple)]
    exact = sum(
        1 for m, _ in got if m.get("seq") == expected["seq"] and m.get("state") == expected["state"]
    )
    for _, writer in got:
        writer.close()
    times.sort()
    return {
        "joiners": config["joiners"],
        "synced": len(got),
        "exact": exact,
        "failed": [repr(r) for r in results if not isinstance(r, tuple)][:3],
        "first_s": times[0] if times else None,
        "p50_s": times[len(times) // 2] if times else None,
        "all_s": times[-1] if times else None,
    }


def main() -> None:
    config = json.loads(sys.argv[1])
    sys.stdin.readline()  # "go": the study has read the server's baseline
    print(json.dumps(uvloop.run(storm(config))), flush=True)
    sys.stdin.readline()  # closed: done


if __name__ == "__main__":
    main()
