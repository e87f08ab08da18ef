"""Peer: the ceiling of the h11 parser — a fixed JSON answer to every request.

h11 parses each request and serializes each response (the way an h11-based
server works), on uvloop, with nothing else. Usage: python -m perf.peers.bare_h11 PORT
"""

from __future__ import annotations

import asyncio
import sys

import h11
import uvloop

BODY = b'{"ok":true,"seq":1,"applied":1}'


class H11Fixed(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.conn = h11.Connection(h11.SERVER)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        conn.receive_data(data)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:
                return
            if isinstance(event, h11.EndOfMessage):
                out = conn.send(
                    h11.Response(
                        status_code=200,
                        headers=[
                            ("content-type", "application/json"),
                            ("content-length", str(len(BODY))),
                        ],
                    )
                )
                out += conn.send(h11.Data(data=BODY)) + conn.send(h11.EndOfMessage())
                self.transport.write(out)  # type: ignore[attr-defined]
                if conn.our_state is h11.MUST_CLOSE:
                    self.transport.close()
                    return
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                self.transport.close()
                return


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(H11Fixed, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
