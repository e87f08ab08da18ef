"""A binary message that is not msgpack gets an ``error`` saying what is wrong.

Some msgpack failures carry no text: a byte no msgpack value starts with
(0xc1) raised a ``FormatError`` whose message is empty, and the reply said
only ``malformed msgpack: ``."""

from __future__ import annotations

from tests.conftest import RunningServer
from tests.ws.support import open_ws, recv


async def test_a_reserved_msgpack_byte_gets_an_error_that_says_something(
    server: RunningServer,
) -> None:
    async with open_ws(server) as ws:
        await ws.send(b"\xc1")  # "never used" in the msgpack spec
        reply = await recv(ws)
        assert reply["kind"] == "error" and reply["error"] == "bad_request"
        detail = reply["message"].removeprefix("malformed msgpack:").strip()
        assert detail, reply
        await ws.send(b"\x91")  # an array cut short: its own text is kept
        assert (await recv(ws))["message"] == "malformed msgpack: Unpack failed: incomplete input"
