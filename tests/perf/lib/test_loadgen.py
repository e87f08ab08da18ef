"""perf.lib.loadgen spreads its connections over several servers (--ports) and
each request over several paths (--spread), and counts every answer."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


async def run_against_two_servers(*extra: str) -> list[Counter[bytes]]:
    """The paths each of two tiny servers was asked for by one loadgen run."""
    seen: list[Counter[bytes]] = [Counter(), Counter()]

    def handler(counter: Counter[bytes]):  # type: ignore[no-untyped-def]
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    counter[head.split(b" ")[1]] += 1
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    await reader.readexactly(length)
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        return handle

    servers = [await asyncio.start_server(handler(c), "127.0.0.1", 0) for c in seen]
    ports = ",".join(str(s.sockets[0].getsockname()[1]) for s in servers)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "perf.lib.loadgen", "--ports", ports, "--path", "/c/{i}/ops", "--spread", "4"),
        *("--method", "POST", "--body", "{}", "--connections", "4"),
        *("--duration", "0.4", "--warmup", "0.2", *extra),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    for server in servers:
        server.close()
    result = json.loads(out)
    assert result["statuses"] == {"200": result["requests"]} and result["requests"] > 0
    assert result["answered"] >= result["requests"]
    assert all(sum(c.values()) > 0 for c in seen)
    return seen


async def test_connections_go_to_every_port_and_requests_to_every_path() -> None:
    seen = await run_against_two_servers()
    paths = set(seen[0]) | set(seen[1])
    assert paths == {f"/c/{i}/ops".encode() for i in range(4)}
    assert set(seen[0]) & set(seen[1])  # without --affinity any server gets any path


async def test_with_affinity_each_server_gets_only_its_share_of_the_paths() -> None:
    seen = await run_against_two_servers("--affinity")
    assert set(seen[0]) == {b"/c/0/ops", b"/c/2/ops"}
    assert set(seen[1]) == {b"/c/1/ops", b"/c/3/ops"}
