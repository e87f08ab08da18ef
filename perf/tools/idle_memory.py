"""Where an idle connection's memory goes: tracemalloc, per connection, by line.

The figure of :mod:`perf.studies.idle_connections` is RSS; this says what
makes it. A syncd server runs in this process; the connections come from a
:mod:`perf.lib.idle_clients` process, opened live as in the study. After a
warm-up, tracemalloc is started (25 frames: slow, but the count is small)
and the heap snapshotted, ``--count`` connections of ``--kind`` are opened,
and the heap is snapshotted again: what was allocated between the two and
is still held. Printed, each divided by the count:

- the bytes still allocated, by the line that allocated them (uvloop's C
  objects show at the line that runs the loop: the transport, libuv's handle;
  its weak reference to the transport at weakref.py);
- with ``--tracebacks N``, the N largest by their whole stack;
- the objects alive by type (from the garbage collector: empty dicts and
  other untracked objects are not counted there, and the census's own list
  shows as a builtins.list).

Usage: python -m perf.tools.idle_memory KIND [--count 2000] [--tracebacks N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any, Final

import uvloop

from perf.lib.idle_clients import KINDS
from perf.lib.servers import ADMIN, ROOT, SIGNING_KEY
from syncd.config import Settings
from syncd.server import Server

NS: Final = "bench"
WARMUP_CONNECTIONS: Final = 200
CRDTS: Final = 100
SETTLE_S: Final = 1.0
FRAMES: Final = 25
SHOWN: Final = 25
SMALLEST_SHOWN: Final = 8
"""Bytes per connection below which a line is not printed."""


def census() -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Objects alive by type: counts and sys.getsizeof totals."""
    counts: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        kind = type(obj)
        name = f"{getattr(kind, '__module__', '')}.{kind.__qualname__}"
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
    return counts, sizes


async def token(port: int) -> str:
    body = json.dumps(
        {"client_id": 7, "rules": {"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": 1_000_000}}
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v1/namespaces/{NS}/tokens HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {ADMIN}"
        f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    answer = await reader.read()
    writer.close()
    return str(json.loads(answer.split(b"\r\n\r\n", 1)[1])["token"])


async def run(kind: str, count: int, tracebacks: int) -> None:
    with tempfile.TemporaryDirectory(prefix="syncd-idle-memory-") as data_dir:
        settings = Settings(
            host="127.0.0.1",
            port=0,
            data_dir=Path(data_dir),
            signing_key=bytes.fromhex(SIGNING_KEY),
            admin_token=ADMIN,
            fsync="never",
            node_id="idle-memory",
            max_connections=WARMUP_CONNECTIONS + count + 100,
            rate_limit=100_000_000,
        )
        server = Server(settings)
        await server.start()
        clients: list[asyncio.subprocess.Process] = []

        async def open_connections(n: int, first: int) -> None:
            config = {"kind": kind, "port": server.port, "ns": NS, "crdts": CRDTS}
            config.update(token=await token(server.port), count=n, first=first)
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "perf.lib.idle_clients",
                json.dumps(config),
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            clients.append(proc)
            assert proc.stdout is not None
            line = await proc.stdout.readline()
            if json.loads(line or b"{}").get("opened") != n:
                raise RuntimeError(f"the clients did not open {n} connections: {line!r}")

        try:
            await open_connections(WARMUP_CONNECTIONS, 0)
            await asyncio.sleep(SETTLE_S)
            gc.collect()
            # Traced from here to the second snapshot only: a snapshot's
            # difference is what was allocated between the two and is still
            # held. The censuses run untraced: traced, they took seconds
            # (most of the tool's 22 s at --count 20), and the first one's
            # counters, alive at the second snapshot, were counted as the
            # connections' (about 2,800 B of the 5,454 B a connection shown).
            counts0, sizes0 = census()
            tracemalloc.start(FRAMES)
            before = tracemalloc.take_snapshot()
            await open_connections(count, WARMUP_CONNECTIONS)
            await asyncio.sleep(SETTLE_S)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            counts1, sizes1 = census()
        finally:
            for proc in clients:
                assert proc.stdin is not None
                proc.stdin.close()
            for proc in clients:
                await proc.wait()
            await server.shutdown()
    report(kind, count, before, after, tracebacks)
    print("-- objects alive, by type (count, bytes by sys.getsizeof):")
    rows = [
        (name, (counts1[name] - counts0[name]) / count, (sizes1[name] - sizes0[name]) / count)
        for name in counts1
    ]
    for name, n, size in sorted(rows, key=lambda r: -r[2])[:SHOWN]:
        if n >= 0.5:
            print(f"{size:8.1f} B {n:6.2f}  {name}")


def report(
    kind: str,
    count: int,
    before: tracemalloc.Snapshot,
    after: tracemalloc.Snapshot,
    tracebacks: int,
) -> None:
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    total = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    print(f"== {kind}: {total / count:,.0f} bytes per connection still allocated (tracemalloc)")
    print("-- by the line that allocated them (bytes, blocks):")
    for stat in after.compare_to(before, "lineno")[:SHOWN]:
        if stat.size_diff / count >= SMALLEST_SHOWN:
            frame = stat.traceback[0]
            where = frame.filename.replace(str(ROOT) + "/", "")
            print(
                f"{stat.size_diff / count:8.1f} B {stat.count_diff / count:6.2f}  {where}:{frame.lineno}"
            )
    if tracebacks:
        print("-- by stack:")
        for stat in after.compare_to(before, "traceback")[:tracebacks]:
            print(f"{stat.size_diff / count:8.1f} B {stat.count_diff / count:6.2f}")
            for line in stat.traceback.format(most_recent_first=True)[:12]:
                print("    " + line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--tracebacks", type=int, default=0, help="the N largest, by stack")
    args: Any = parser.parse_args(argv)
    uvloop.run(run(args.kind, args.count, args.tracebacks))


if __name__ == "__main__":
    main()
