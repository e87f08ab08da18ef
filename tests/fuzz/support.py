"""The fuzzers' harness: a real server on its own thread, blocking raw clients, invariants.

Hypothesis drives plain (synchronous) test functions, so the server under test
runs on a uvloop of its own in a background thread (``ThreadedServer``) and the
fuzz cases talk to it over real sockets with a small select-based pump: send
everything, half-close, read until the server closes, all under one deadline.
A connection the server does not close within the deadline after the client's
EOF is a hang.

``LogWatch`` collects every ERROR record and every record with a traceback
from the ``syncd`` and ``asyncio`` loggers (what caplog would catch, but alive
for a whole module so one server serves many test functions). uvloop reports
exceptions escaping protocol callbacks and unretrieved task exceptions
through ``asyncio``'s logger, so those count too.

The invariants every case checks:

- no 500, and no status outside the API's set;
- every JSON error body is exactly ``{"error", "message"}`` with string values;
- no log record of the kinds above;
- the server still answers a fresh healthy client promptly.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgpack
import uvloop

from syncd.config import Settings
from syncd.server import Server
from tests.conftest import base_settings

HANG_S = 10.0
"""How long a case's connection may stay open after the client's EOF. Generous:
the machine is shared, and a real hang is forever."""

HEALTH_S = 2.0
"""A healthy client's request must be answered within this between cases."""

FUZZ_RATE_LIMIT = 10**6
"""High enough that fuzzed tokens never hit 429 and mask deeper paths."""

STATUSES = frozenset(
    {100, 101, 200, 204, 400, 401, 403, 404, 405, 409, 413, 415, 429, 431, 501, 505}
)
"""Every status the API answers when nothing is wrong with the server itself."""

WS_KINDS = frozenset({"error", "pong", "ack", "snapshot", "synced", "op", "deleted"})
"""Kinds of the messages the server sends over a WebSocket."""


def examples(default: int) -> int:
    """Cases per fuzz test: ``SYNCD_FUZZ_EXAMPLES`` when set, else ``default``."""
    raw = os.environ.get("SYNCD_FUZZ_EXAMPLES")
    return int(raw) if raw else default


# --- the server on a thread --------------------------------------------------


class ThreadedServer:
    """The real server (``syncd.server.Server``) on a uvloop in a daemon thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server: Server | None = None
        self.loop = uvloop.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fuzz-server", daemon=True)

    def _run(self) -> None:
        loop = self.loop
        try:
            self.server = Server(self.settings)
            loop.run_until_complete(self.server.start())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def start(self) -> ThreadedServer:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop and return its result."""
        done = threading.Event()
        box: list[Any] = []

        def run() -> None:
            try:
                box.append((True, fn(*args)))
            except BaseException as exc:
                box.append((False, exc))
            done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(30)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        server = self.server
        if server is not None:
            import asyncio

            future = asyncio.run_coroutine_threadsafe(server.shutdown(), self.loop)
            with contextlib.suppress(Exception):
                future.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


def fuzz_settings(data_dir: Path, parser: str, **overrides: Any) -> Settings:
    settings = base_settings(data_dir, parser)
    from tests.fuzz.strategies import FUZZ_MAX_BODY

    return replace(
        settings,
        rate_limit=FUZZ_RATE_LIMIT,
        max_body_bytes=FUZZ_MAX_BODY,
        demo=True,
        cors_origins=("https://ok.example",),
        **overrides,
    )


# --- logs ----------------------------------------------------------------------


class LogWatch(logging.Handler):
    """Records that mean something went wrong inside the server."""

    LOGGERS = ("syncd", "asyncio")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.problems: list[str] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            text = self.format(record)
            with self._guard:
                self.problems.append(f"{record.name} {record.levelname}: {text}")

    def take(self) -> list[str]:
        with self._guard:
            problems, self.problems = self.problems, []
        return problems

    @contextlib.contextmanager
    def installed(self) -> Iterator[LogWatch]:
        loggers = [logging.getLogger(name) for name in self.LOGGERS]
        saved = [(lg, lg.level) for lg in loggers]
        for lg in loggers:
            lg.addHandler(self)
            if lg.level == logging.NOTSET or lg.level > logging.INFO:
                lg.setLevel(logging.INFO)
        try:
            yield self
        finally:
            for lg, level in saved:
                lg.removeHandler(self)
                lg.setLevel(level)


# --- raw connections -------------------------------------------------------------


class Hang(AssertionError):
    """The server kept a connection open past the deadline after the client's EOF."""


class Received(bytes):
    """Bytes read until EOF; ``reset`` when the connection ended with a reset
    (the server closed with our bytes unread), which may cut its last answer."""

    reset: bool = False


def pump(
    sock: socket.socket,
    data: bytes,
    *,
    deadline_s: float = HANG_S,
    until: Callable[[bytes], bool] | None = None,
) -> Received:
    """Send ``data`` while reading, half-close, then read until EOF (or a reset).

    With ``until``, nothing is half-closed and reading stops as soon as
    everything is sent and ``until(received)`` holds (or at EOF).

    Reading while sending matters: a server that answers a pipeline while we
    are still sending would otherwise fill both buffers and wedge us both.
    """
    half_close = until is None
    sock.setblocking(False)
    received = bytearray()
    view = memoryview(data)
    sel = selectors.DefaultSelector()
    deadline = time.monotonic() + deadline_s
    sending = True
    try:
        sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Hang(f"no EOF within {deadline_s} s; got {bytes(received[:300])!r}")
            for _key, mask in sel.select(remaining):
                if mask & selectors.EVENT_READ:
                    try:
                        chunk = sock.recv(262144)
                    except (ConnectionResetError, BrokenPipeError):
                        out = Received(received)
                        out.reset = True
                        return out
                    except BlockingIOError:
                        chunk = None
                    if chunk == b"":
                        return Received(received)
                    if chunk:
                        received += chunk
                        if until is not None and not sending and until(bytes(received)):
                            return Received(received)
                if sending and mask & selectors.EVENT_WRITE:
                    try:
                        sent = sock.send(view) if view else 0
                    except BlockingIOError:
                        sent = 0
                    except (ConnectionResetError, BrokenPipeError):
                        view = view[len(view) :]
                        sent = 0
                    view = view[sent:]
                    if not view:
                        sending = False
                        if half_close:
                            with contextlib.suppress(OSError):
                                sock.shutdown(socket.SHUT_WR)
                        sel.modify(sock, selectors.EVENT_READ)
                        if until is not None and until(bytes(received)):
                            return Received(received)
    finally:
        sel.close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=HANG_S)


def http_exchange(port: int, data: bytes) -> Received:
    with connect(port) as sock:
        return pump(sock, data)


def check_healthy(port: int) -> None:
    """A fresh client gets ``/health/live`` answered promptly."""
    started = time.monotonic()
    with connect(port) as sock:
        data = pump(sock, b"GET /health/live HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    took = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 200 "), f"health check answered {data[:200]!r}"
    assert took < HEALTH_S, f"health check took {took:.3f} s"


# --- HTTP responses -------------------------------------------------------------


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def parse_responses(data: bytes, methods: list[str]) -> list[HttpResponse]:
    """The responses in ``data``, answering requests of ``methods`` in order.

    Stops at a 101 (the rest is WebSocket) or an event stream (runs to EOF).
    Raises AssertionError on bytes that are not a well-formed response, except
    for a tail cut by a connection reset.
    """
    out: list[HttpResponse] = []
    pos = 0
    index = 0
    cut_ok = isinstance(data, Received) and data.reset
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0 and cut_ok:
            return out
        assert end >= 0, f"incomplete response head: {data[pos : pos + 200]!r}"
        lines = data[pos:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        assert parts[0] == "HTTP/1.1" and parts[1].isdigit(), f"bad status line {lines[0]!r}"
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            assert sep, f"bad header line {line!r}"
            headers[name.strip().lower()] = value.strip()
        pos = end + 4
        if status == 100:
            out.append(HttpResponse(status, headers, b""))
            continue
        method = methods[index] if index < len(methods) else "GET"
        index += 1
        if status == 101 or headers.get("content-type", "").startswith("text/event-stream"):
            out.append(HttpResponse(status, headers, data[pos:]))
            return out
        if method == "HEAD" and headers.get("connection") == "close" and status >= 400:
            # A request the parser refused gets its error body even when its
            # method was HEAD: the server answers before it knows the method.
            # The connection closes after it, so no client is misled.
            method = "HEAD" if len(data) - pos < int(headers.get("content-length", 0)) else "GET"
        if method == "HEAD" or status in (204, 304):
            out.append(HttpResponse(status, headers, b""))
            continue
        assert "content-length" in headers, f"no content-length: {lines!r}"
        length = int(headers["content-length"])
        body = data[pos : pos + length]
        if len(body) < length and cut_ok:
            return out
        assert len(body) == length, f"truncated body: {length} announced, {len(body)} sent"
        out.append(HttpResponse(status, headers, body))
        pos += length
    return out


def check_response(response: HttpResponse) -> None:
    status = response.status
    assert status != 500, f"500: {response.body[:300]!r}"
    assert status in STATUSES, f"unexpected status {status}: {response.body[:300]!r}"
    ctype = response.headers.get("content-type", "")
    if status >= 400:
        assert ctype == "application/json", f"{status} with content-type {ctype!r}"
    if ctype == "application/json" and response.body:
        body = json.loads(response.body)
        if status >= 400:
            # error and message always; 429 adds retry_after, 410 oldest.
            assert isinstance(body, dict) and {"error", "message"} <= set(body), body
            assert set(body) <= {"error", "message", "retry_after", "oldest"}, body
            assert isinstance(body["error"], str) and isinstance(body["message"], str), body


# --- WebSocket ---------------------------------------------------------------------


def upgrade_request(ns: str, token: str, extra_headers: bytes = b"") -> bytes:
    key = base64.b64encode(os.urandom(16))
    return (
        f"GET /v1/namespaces/{ns}/ws?token={token} HTTP/1.1\r\n".encode()
        + b"Host: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
        + key
        + b"\r\n"
        + extra_headers
        + b"\r\n"
    )


def open_ws(port: int, token: str, ns: str = "app") -> tuple[socket.socket, bytes]:
    """A raw socket after a real upgrade, and any bytes read past the 101 head."""
    sock = connect(port)
    sock.sendall(upgrade_request(ns, token))
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"closed during the handshake: {buffer!r}"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 "), head
    return sock, rest


def client_frame(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bytes | None = b"\x00\x00\x00\x00",
    length: int | None = None,
    length_form: int | None = None,
) -> bytes:
    """A client frame, with every field settable (lies included).

    ``length`` is the declared payload length (default: the real one);
    ``length_form`` forces 7-bit (0), 16-bit (126) or 64-bit (127) encoding.
    """
    declared = len(payload) if length is None else length
    first = (0x80 if fin else 0) | (rsv & 0x7) << 4 | (opcode & 0x0F)
    mask_bit = 0x80 if mask is not None else 0
    form = length_form
    if form is None:
        form = 0 if declared < 126 else 126 if declared < 65536 else 127
    if form == 0:
        header = struct.pack("!BB", first, mask_bit | (declared & 0x7F))
    elif form == 126:
        header = struct.pack("!BBH", first, mask_bit | 126, declared & 0xFFFF)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, declared & 0xFFFFFFFFFFFFFFFF)
    if mask is None:
        return header + payload
    key = (mask + b"\x00\x00\x00\x00")[:4]
    return header + key + _xor(payload, key)


def _xor(payload: bytes, key: bytes) -> bytes:
    if not payload:
        return b""
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big"
    )


SYNC_REF = "fuzz-sync"
SYNC_PONG = msgpack.packb({"kind": "pong", "ref": SYNC_REF})
SYNC_PING = client_frame(
    0x2, msgpack.packb({"kind": "ping", "ref": SYNC_REF}), mask=b"\x0f\x1e\x2d\x3c"
)
CLOSE_NORMAL = client_frame(0x8, (1000).to_bytes(2, "big"), mask=b"\x01\x02\x03\x04")


def _synced(got: bytes) -> bool:
    """Our sync pong came, or the server started closing (then no pong will)."""
    return SYNC_PONG in got or any(f.opcode == 0x8 for f in parse_server_frames(got).frames)


def ws_case(port: int, token: str, frames: bytes, *, sync: bool) -> bytes:
    """Everything the server sends on a fresh WebSocket for ``frames``.

    With ``sync`` (frames whose lengths do not lie) a ping message follows the
    frames and we wait for its pong before closing, so the answers to ops
    (which wait for the store) arrive before our close frame makes the server
    drop them. Then a normal close, and we read until the server closes.
    """
    sock, early = open_ws(port, token)
    with sock:
        data = early
        if sync:
            data += pump(sock, frames + SYNC_PING, until=_synced)
            frames = b""
        data += pump(sock, frames + CLOSE_NORMAL)
    return data


@dataclass
class ServerFrame:
    fin: bool
    opcode: int
    payload: bytes


@dataclass
class WsTranscript:
    frames: list[ServerFrame] = field(default_factory=list)
    leftover: bytes = b""


def parse_server_frames(data: bytes) -> WsTranscript:
    """Every complete frame the server sent; asserts each is a well-formed server frame."""
    out = WsTranscript()
    pos = 0
    while pos + 2 <= len(data):
        b0, b1 = data[pos], data[pos + 1]
        assert b1 & 0x80 == 0, "server frames must not be masked"
        assert b0 & 0x70 == 0, "server frames use no RSV bits"
        length = b1 & 0x7F
        offset = pos + 2
        if length == 126:
            if offset + 2 > len(data):
                break
            (length,) = struct.unpack_from("!H", data, offset)
            offset += 2
        elif length == 127:
            if offset + 8 > len(data):
                break
            (length,) = struct.unpack_from("!Q", data, offset)
            offset += 8
        if offset + length > len(data):
            break
        out.frames.append(ServerFrame(bool(b0 & 0x80), b0 & 0x0F, data[offset : offset + length]))
        pos = offset + length
    out.leftover = data[pos:]
    return out


VALID_CLOSE_CODES = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011})


def check_ws_transcript(transcript: WsTranscript) -> list[dict[str, Any]]:
    """Every server frame well formed; data frames decode to known messages; no
    ``internal`` errors; a close carries a valid code. Returns the messages."""
    messages: list[dict[str, Any]] = []
    closed = False
    for frame in transcript.frames:
        assert frame.fin, "the server sends whole messages"
        assert not closed, "nothing may follow the server's close frame"
        if frame.opcode == 0x1:
            message = json.loads(frame.payload.decode("utf-8"))
        elif frame.opcode == 0x2:
            message = msgpack.unpackb(frame.payload, raw=False)
        elif frame.opcode == 0x8:
            closed = True
            payload = frame.payload
            assert len(payload) != 1, "a close payload is empty or holds a code"
            if payload:
                (code,) = struct.unpack("!H", payload[:2])
                assert code in VALID_CLOSE_CODES or 3000 <= code <= 4999, code
                payload[2:].decode("utf-8")
            continue
        elif frame.opcode in (0x9, 0xA):
            assert len(frame.payload) <= 125
            continue
        else:
            raise AssertionError(f"server sent opcode {frame.opcode:#x}")
        assert isinstance(message, dict), message
        kind = message.get("kind")
        assert kind in WS_KINDS, message
        if kind == "error":
            assert message["error"] != "internal", message
            assert isinstance(message["error"], str) and isinstance(message["message"], str)
        messages.append(message)
    assert transcript.leftover == b"", f"partial frame at EOF: {transcript.leftover[:50]!r}"
    return messages


# --- processes ---------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))
