"""CPU cost of one request through syncd's HTTP path, without sockets.

A fake transport feeds pre-built request bytes to the real HttpProtocol of a
real (in-process) app, so the figure is our Python work per request: parse,
route, auth, engine, store append, answer. ``--connections C`` keeps C
connections with one request in flight each, as a closed-loop load generator
does (wrk's 50 connections): the group commit then writes about C ops per
batch, as it does under that load, instead of one. ``--batch`` sends 100-op
batches instead of single increments. The store does not fsync (``never``):
the figure is the CPU of the loop, not the disk's latency.

Exact, repeatable instruction counts on a noisy machine: run it under
callgrind at two sizes and take the difference, which leaves out start-up::

    valgrind --tool=callgrind python -m perf.studies.http_path 1000 --parser httptools
    valgrind --tool=callgrind python -m perf.studies.http_path 4000 --parser httptools
    # (Ir of the second - Ir of the first) / 3000 = instructions per request

Usage: python -m perf.studies.http_path [N] [--parser P] [--connections C] [--batch] [--warmup W]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from syncd.auth.issue import issue_token
from syncd.auth.tokens import SigningKey
from syncd.config import Settings
from syncd.http.protocol import HttpProtocol
from syncd.server import Server

try:
    from syncd.collector import settle_after_start
except ImportError:  # a checkout from before the collector's settings (--compare runs)
    settle_after_start = None

BATCH_OPS = 100
"""Ops per request with ``--batch``: perf.bench.http_ops' batches."""


class FakeTransport:
    def __init__(self, answered: list[int], waiter: list[asyncio.Future[None] | None]) -> None:
        self.out: list[bytes] = []
        self.closing = False
        self._answered = answered
        self._waiter = waiter

    def write(self, data: bytes) -> None:
        self.out.append(data)
        if len(self.out) > 4:
            del self.out[:-2]  # the last answer is checked; the rest is not kept
        self._answered[0] += 1
        waiter = self._waiter[0]
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def request_bytes(token: str, batch: bool) -> bytes:
    op = b'{"op":"increment","amount":1}'
    body = b"[" + b",".join([op] * BATCH_OPS) + b"]" if batch else op
    return (
        b"POST /v1/namespaces/b/crdts/gc:x/ops HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
        + b"Authorization: Bearer "
        + token.encode()
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


async def bench(parser: str, n: int, connections: int, batch: bool, warmup: int) -> float:
    """CPU microseconds per request, over ``n`` requests after ``warmup``."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            host="127.0.0.1",
            port=0,
            data_dir=Path(tmp),
            signing_key=b"\x01" * 32,
            admin_token="x" * 20,
            fsync="never",
            http_parser=parser,
        )  # type: ignore[arg-type]
        server = Server(settings)
        await server.start()
        if settle_after_start is not None:
            settle_after_start()  # as python -m syncd does once started
        token = issue_token(
            SigningKey(b"\x01" * 32),
            namespace="b",
            client_id=7,
            ttl_ms=3600_000,
            rules={"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": 1_000_000},
            now_ms=int(time.time() * 1000),
        )
        request = request_bytes(token, batch)
        loop = asyncio.get_running_loop()
        answered = [0]
        waiter: list[asyncio.Future[None] | None] = [None]
        protocols: list[HttpProtocol] = []
        transports: list[FakeTransport] = []
        for _ in range(connections):
            proto = HttpProtocol(server.ctx, loop)
            transport = FakeTransport(answered, waiter)
            proto.connection_made(transport)  # type: ignore[arg-type]
            protocols.append(proto)
            transports.append(transport)
        rounds = -(-n // connections)
        warm = -(-warmup // connections)
        started = 0.0
        for i in range(rounds + warm):
            if i == warm:
                # CPU time, not wall time: the figure should not depend on
                # what else the (shared) machine is doing.
                started = time.process_time()
            answered[0] = 0
            for proto in protocols:
                proto.data_received(request)
            while answered[0] < connections:
                waiter[0] = loop.create_future()
                await waiter[0]
        elapsed = time.process_time() - started
        for transport in transports:
            assert transport.out[-1].startswith(b"HTTP/1.1 200"), transport.out[-1]
        await server.shutdown()
        gc.unfreeze()  # the next parser's run starts as this one did
        return elapsed / (rounds * connections) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=20000, help="requests measured")
    parser.add_argument("--parser", choices=("h11", "httptools"), action="append")
    parser.add_argument("--connections", type=int, default=1, help="requests in flight")
    parser.add_argument("--batch", action="store_true", help=f"{BATCH_OPS}-op batches")
    parser.add_argument("--warmup", type=int, default=2000, help="requests before measuring")
    args = parser.parse_args()
    what = f"{BATCH_OPS}-op batch" if args.batch else "gcounter increment"
    for name in args.parser or ("h11", "httptools"):
        us = uvloop.run(bench(name, args.n, args.connections, args.batch, args.warmup))
        print(
            f"{name:10} {us:7.1f} us CPU per {what} request "
            f"(in-process, {args.connections} in flight, fsync never)"
        )


if __name__ == "__main__":
    main()
