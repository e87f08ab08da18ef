"""The frame layer, bytes in and events out (a wsproto client makes the frames)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage

from syncd.ws.framing import (
    MAX_CONTROL_PAYLOAD,
    Failed,
    FrameLayer,
    Message,
    PeerClosed,
    Reply,
    _unmask,
)
from tests.ws.support import client_frame


def _client() -> Connection:
    return Connection(ConnectionType.CLIENT)


def test_messages_come_out_whole_in_their_type() -> None:
    client, layer = _client(), FrameLayer(100)
    layer.feed(client.send(BytesMessage(b"abc")) + client.send(TextMessage("hé")))
    events = list(layer.events())
    assert [type(e) for e in events] == [Message, Message]
    assert [e.data for e in events if isinstance(e, Message)] == [b"abc", "hé"]


def test_bytes_split_anywhere_still_make_one_message() -> None:
    client, layer = _client(), FrameLayer(1000)
    wire = client.send(BytesMessage(b"x" * 300))
    out: list[object] = []
    for i in range(len(wire)):
        layer.feed(wire[i : i + 1])
        out += list(layer.events())
    assert len(out) == 1 and isinstance(out[0], Message) and out[0].data == b"x" * 300


def test_size_limit_counts_utf8_bytes_and_fragments() -> None:
    client, layer = _client(), FrameLayer(10)
    layer.feed(client.send(TextMessage("é" * 5)))  # 10 bytes: fine
    assert [e.data for e in layer.events() if isinstance(e, Message)] == ["é" * 5]
    layer.feed(client.send(TextMessage("é" * 6)))  # 6 characters, 12 bytes: too big
    (event,) = list(layer.events())
    assert isinstance(event, Failed) and event.code == 1009
    client, layer = _client(), FrameLayer(10)
    layer.feed(client.send(BytesMessage(b"123456", message_finished=False)))
    assert list(layer.events()) == []
    layer.feed(client.send(BytesMessage(b"78901", message_finished=True)))
    (event,) = list(layer.events())
    assert isinstance(event, Failed) and event.code == 1009


def test_after_too_big_the_rest_is_dropped_and_the_peer_close_seen() -> None:
    client, layer = _client(), FrameLayer(10)
    wire = client.send(BytesMessage(b"z" * 50))
    layer.feed(wire[:20])
    (event,) = list(layer.events())
    assert isinstance(event, Failed) and event.code == 1009
    assert layer.close(1009)  # our close frame
    assert not layer.open and layer.reading
    layer.feed(wire[20:] + client.send(BytesMessage(b"late")))
    layer.feed(client.send(CloseConnection(code=1009)))
    (closed,) = list(layer.events())
    assert isinstance(closed, PeerClosed)
    assert layer.closed and layer.answer_close(closed) == b""  # already complete


def test_ping_gets_a_pong_reply() -> None:
    client, layer = _client(), FrameLayer(10)
    layer.feed(client.send(Ping(b"hi")))
    (event,) = list(layer.events())
    assert isinstance(event, Reply)
    client.receive_data(event.data)
    assert [type(e).__name__ for e in client.events()] == ["Pong"]


def test_an_idle_connection_needs_no_wsproto_until_it_closes() -> None:
    """Whole messages, the keepalive's pings and the peer's pongs and pings
    are read without wsproto's connection (~1.5 KB an idle socket need not
    keep); its answers are wsproto's byte for byte, and the close makes it."""
    client, layer = _client(), FrameLayer(100)
    ping = layer.ping()
    assert ping == bytes(Connection(ConnectionType.SERVER).send(Ping(b"")))
    client.receive_data(ping)
    (received,) = client.events()
    assert isinstance(received, Ping)
    layer.feed(client.send(received.response()))  # the peer's pong: nothing to say
    layer.feed(client.send(BytesMessage(b"op")) + client.send(Ping(b"are you there")))
    message, reply = list(layer.events())
    assert isinstance(message, Message) and message.data == b"op"
    assert isinstance(reply, Reply)
    assert reply.data == bytes(Connection(ConnectionType.SERVER).send(Pong(b"are you there")))
    assert layer._conn is None and layer.open
    assert layer.close(1000)[:4] == b"\x88\x02\x03\xe8"
    assert layer._conn is not None and not layer.open and layer.reading


def test_a_ping_payload_is_at_most_a_control_frames() -> None:
    layer = FrameLayer(100)
    assert len(layer.ping(b"p" * MAX_CONTROL_PAYLOAD)) == 2 + MAX_CONTROL_PAYLOAD
    with pytest.raises(ValueError):
        layer.ping(b"p" * (MAX_CONTROL_PAYLOAD + 1))


def test_a_control_frame_in_a_wide_length_field_is_a_violation() -> None:
    """Only a two-byte head is a well-formed control frame: the fast path
    hands anything else to wsproto, which refuses it."""
    layer = FrameLayer(100)
    layer.feed(b"\x89\xfe\x00\x01\x00\x00\x00\x00p")  # a ping, length in 16 bits
    (event,) = list(layer.events())
    assert isinstance(event, Failed) and event.code == 1002


def test_protocol_violation_fails_and_stops_parsing() -> None:
    layer = FrameLayer(100)
    layer.feed(client_frame(0x2, b"x", mask=False))
    (event,) = list(layer.events())
    assert isinstance(event, Failed) and event.code == 1002
    assert not layer.reading and not layer.open
    layer.feed(b"anything")  # ignored, no exception
    assert list(layer.events()) == []
    assert layer.close(1002)[:4] == b"\x88\x02\x03\xea"


def test_peer_close_is_answered_once() -> None:
    client, layer = _client(), FrameLayer(100)
    layer.feed(client.send(CloseConnection(code=1000, reason="done")))
    (event,) = list(layer.events())
    assert isinstance(event, PeerClosed) and (event.code, event.reason) == (1000, "done")
    answer = layer.answer_close(event)
    assert answer[:4] == b"\x88\x02\x03\xe8"
    assert layer.closed and layer.answer_close(event) == b"" and layer.close(1000) == b""
    layer.feed(b"\x88\x00")  # nothing is parsed after the handshake
    assert list(layer.events()) == []


def test_close_without_status_is_answered_without_status() -> None:
    layer = FrameLayer(100)
    layer.feed(client_frame(0x8, b""))
    (event,) = list(layer.events())
    assert isinstance(event, PeerClosed) and event.code == 1005
    assert layer.answer_close(event) == b"\x88\x00"


# --- the fast path gives what wsproto alone gives ------------------------------

MAX = 64
EXAMPLES = int(os.environ.get("SYNCD_HYPOTHESIS_EXAMPLES", "200"))


def _frame(opcode: int, payload: bytes, *, fin: bool, masked: bool, rsv: int, wide: bool) -> bytes:
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    mask_bit = 0x80 if masked else 0
    if wide:  # a longer length encoding than needed (a violation when n is small)
        head = bytes((first, mask_bit | 126)) + n.to_bytes(2, "big")
    elif n < 126:
        head = bytes((first, mask_bit | n))
    elif n < 65536:
        head = bytes((first, mask_bit | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((first, mask_bit | 127)) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    key = bytes((1, 2, 3, 4))
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


@st.composite
def _frames(draw: st.DrawFn) -> bytes:
    kinds = [
        "binary",
        "text",
        "badtext",
        "big",
        "unfinished",
        "wide",
        "fragments",
        "control",
        "odd",
    ]
    kind = draw(st.sampled_from(kinds))
    normal: dict[str, Any] = {"fin": True, "masked": True, "rsv": 0, "wide": False}
    if kind == "binary":
        return _frame(0x2, draw(st.binary(max_size=MAX)), **normal)
    if kind == "text":
        text = draw(st.text(max_size=MAX // 2)).encode("utf-8", "surrogatepass")
        return _frame(0x1, text, **normal)
    if kind == "badtext":
        return _frame(0x1, draw(st.binary(max_size=MAX)), **normal)
    if kind == "big":  # over the limit, in one frame
        opcode = draw(st.sampled_from([0x1, 0x2]))
        return _frame(opcode, b"b" * draw(st.integers(MAX + 1, MAX + 200)), **normal)
    if kind == "unfinished":  # a first fragment; what follows may not continue it
        data = draw(st.binary(max_size=10))
        return _frame(draw(st.sampled_from([0x1, 0x2])), data, **dict(normal, fin=False))
    if kind == "wide":  # a needlessly long length field: a violation
        return _frame(0x2, draw(st.binary(max_size=10)), **dict(normal, wide=True))
    if kind == "fragments":
        opcode = draw(st.sampled_from([0x1, 0x2]))
        parts = draw(st.lists(st.text(max_size=30), min_size=1, max_size=4))
        out = b""
        for i, part in enumerate(parts):
            data = part.encode("utf-8", "surrogatepass")
            out += _frame(opcode if i == 0 else 0x0, data, **dict(normal, fin=i == len(parts) - 1))
            if draw(st.booleans()):
                out += _frame(0x9, b"p", **normal)  # control frames may interleave
        return out
    if kind == "control":
        opcode = draw(st.sampled_from([0x8, 0x9, 0xA]))
        if opcode == 0x8:
            code = draw(st.sampled_from([1000, 1001, 3000, 4999, 999, 1005]))
            payload = code.to_bytes(2, "big") + draw(st.binary(max_size=5))
        else:
            payload = draw(st.binary(max_size=10))
        return _frame(opcode, payload, **normal)
    return _frame(
        draw(st.integers(0, 15)),
        draw(st.binary(max_size=10)),
        fin=draw(st.booleans()),
        masked=draw(st.booleans()),
        rsv=draw(st.integers(0, 7)),
        wide=draw(st.booleans()),
    )


def _run(layer: FrameLayer, chunks: list[bytes]) -> list[tuple[str, object]]:
    """Drive a layer the way the session does; describe what comes out."""
    out: list[tuple[str, object]] = []
    for chunk in chunks:
        layer.feed(chunk)
        while True:
            events = list(layer.events())
            for event in events:
                if isinstance(event, Message):
                    out.append(("message", event.data))
                elif isinstance(event, Reply):
                    out.append(("reply", event.data))
                elif isinstance(event, PeerClosed):
                    out.append(("closed", event.code))
                    layer.answer_close(event)
                else:
                    out.append(("failed", event.code))
                    layer.close(event.code)
            if not (events and isinstance(events[-1], Failed) and layer.reading):
                break
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(_frames(), max_size=8), st.lists(st.integers(1, 40), max_size=30))
def test_fast_path_matches_wsproto(frames: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(frames)
    chunks, at = [], 0
    for cut in cuts:
        chunks.append(wire[at : at + cut])
        at += cut
    chunks.append(wire[at:])
    fast = _run(FrameLayer(MAX), chunks)
    slow = _run(FrameLayer(MAX, fast_path=False), chunks)
    assert fast == slow


def test_fast_path_refuses_an_announced_giant_at_once() -> None:
    layer = FrameLayer(MAX)
    layer.feed(b"\x82\xff" + (2**40).to_bytes(8, "big") + b"\x00\x00\x00\x00")
    (event,) = list(layer.events())
    assert isinstance(event, Failed) and event.code == 1009


def test_unmask_matches_bytewise_xor_at_every_length() -> None:
    key = bytes((0x37, 0xFA, 0x21, 0x3D))
    for n in [*range(0, 300), 4095, 4096, 70000]:
        payload = bytes((i * 7 + 3) % 256 for i in range(n))
        buf = bytearray(b"hd" + key + payload)
        expected = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        assert _unmask(buf, 6, 6 + n) == expected, n
