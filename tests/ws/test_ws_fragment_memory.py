"""What a fragmented message costs while it is gathered, through the real frame layer."""

from __future__ import annotations

import tracemalloc

from syncd.ws.framing import FrameLayer, Message
from tests.ws.support import client_frame

FRAGMENTS = 10_000


def _gather(opcode: int, payload: bytes) -> tuple[Message, int]:
    layer = FrameLayer(1 << 20)
    wire = bytearray(client_frame(opcode, payload, fin=False))
    for _ in range(FRAGMENTS - 2):
        wire += client_frame(0x0, payload, fin=False)
    wire += client_frame(0x0, payload)
    message = None
    tracemalloc.start()
    try:
        for at in range(0, len(wire), 8192):
            layer.feed(bytes(wire[at : at + 8192]))
            for event in layer.events():
                assert isinstance(event, Message), event
                message = event
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message is not None
    return message, peak


def test_a_message_of_tiny_fragments_costs_about_its_size() -> None:
    """SERVICE_MAX_BODY_BYTES bounds a WebSocket message. Its fragments were
    kept as a list of bytes objects: over 40 bytes per byte of message, 120 at
    the peak (a 1 MiB message of 1-byte fragments: over 100 MB)."""
    message, peak = _gather(0x2, b"a")
    assert message.data == b"a" * FRAGMENTS
    assert peak < 20 * FRAGMENTS, peak


def test_a_text_message_of_fragments_is_whole() -> None:
    message, _ = _gather(0x1, "é".encode())
    assert message.data == "é" * FRAGMENTS
