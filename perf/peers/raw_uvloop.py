"""Peer: the machine's ceiling — a raw uvloop protocol answering fixed bytes.

It counts requests by their blank line only; no parser at all.
Usage: python -m perf.peers.raw_uvloop PORT
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

BODY = b'{"ok":true,"seq":1,"applied":1}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


class Raw(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        data = self.pending + data
        # Each request head ends with a blank line; bodies are short JSON with
        # a Content-Length we skip by finding the next request start.
        count = 0
        start = 0
        while True:
            end = data.find(b"\r\n\r\n", start)
            if end < 0:
                break
            head = data[start:end]
            length = 0
            idx = head.lower().find(b"content-length:")
            if idx >= 0:
                line_end = head.find(b"\r\n", idx)
                length = int(head[idx + 15 : line_end if line_end >= 0 else len(head)])
            if end + 4 + length > len(data):
                break
            start = end + 4 + length
            count += 1
        self.pending = data[start:]
        if count:
            self.transport.write(RESPONSE * count)  # type: ignore[attr-defined]


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Raw, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
