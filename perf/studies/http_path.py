"""CPU cost of one request through syncd's HTTP path, without sockets.

A fake transport feeds pre-built request bytes to the real HttpProtocol of a
real (in-process) app with SERVICE_FSYNC=never, so the figure is our Python
work per request: parse, route, auth, engine, store append, answer.
Usage: python -m perf.studies.http_path [N]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from syncd.auth.issue import issue_token
from syncd.config import Settings
from syncd.http.protocol import HttpProtocol
from syncd.server import Server


class FakeTransport:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.closing = False
        self.waiter: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        self.out.append(data)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

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


async def bench(parser: str, n: int) -> float:
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
        from syncd.auth.tokens import SigningKey

        token = issue_token(
            SigningKey(b"\x01" * 32),
            namespace="b",
            client_id=7,
            ttl_ms=3600_000,
            rules={"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": 1_000_000},
            now_ms=int(time.time() * 1000),
        )
        body = b'{"op":"increment","amount":1}'
        request = (
            b"POST /v1/namespaces/b/crdts/gc:x/ops HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
            + b"Authorization: Bearer "
            + token.encode()
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        proto = HttpProtocol(server.ctx, asyncio.get_running_loop())
        transport = FakeTransport()
        proto.connection_made(transport)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        for i in range(n + 2000):
            if i == 2000:
                # CPU time, not wall time: the figure should not depend on
                # what else the (shared) machine is doing.
                started = time.process_time()
            count = len(transport.out)
            transport.waiter = loop.create_future()
            proto.data_received(request)
            if len(transport.out) == count:
                await transport.waiter
        elapsed = time.process_time() - started
        assert transport.out[-1].startswith(b"HTTP/1.1 200"), transport.out[-1]
        await server.shutdown()
        return elapsed / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    for parser in ("h11", "httptools"):
        us = uvloop.run(bench(parser, n))
        print(
            f"{parser:10} {us:7.1f} us CPU per gcounter increment request (in-process, fsync never)"
        )


if __name__ == "__main__":
    main()
