"""The WebSocket opening handshake (RFC 6455 section 4.2), without I/O.

The HTTP server has already parsed the request; here we only check that it is
a well-formed version-13 upgrade and build the ``101`` head. No subprotocol
and no extension is negotiated: broadcast frames are built once and written
as they are to every connection, which per-connection compression would undo.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from syncd.errors import ApiError, bad_request, unavailable

if TYPE_CHECKING:
    from syncd.http.protocol import ServerContext

WS_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WS_VERSION: Final = "13"
KEY_BYTES: Final = 16
"""Sec-WebSocket-Key is a base64-encoded 16-byte nonce (RFC 6455 4.1)."""


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1(key.encode("ascii") + WS_GUID, usedforsecurity=False).digest()
    return base64.b64encode(digest).decode("ascii")


def _tokens(value: str) -> set[str]:
    return {token.strip().lower() for token in value.split(",")}


def check_upgrade(http_version: str, headers: Mapping[str, str]) -> str:
    """The request's ``Sec-WebSocket-Key`` once the handshake headers check out.

    ``headers`` maps lower-case names to values (repeated headers joined with
    commas). Raises a 400 ApiError naming the first problem.
    """
    if http_version != "1.1":
        raise bad_request("a WebSocket upgrade needs HTTP/1.1")
    if "websocket" not in _tokens(headers.get("upgrade", "")):
        raise bad_request("Upgrade: websocket is required")
    if "upgrade" not in _tokens(headers.get("connection", "")):
        raise bad_request("Connection: Upgrade is required")
    version = headers.get("sec-websocket-version", "").strip()
    if version != WS_VERSION:
        raise ApiError(
            400,
            "bad_request",
            f"Sec-WebSocket-Version must be {WS_VERSION}",
            headers=(("Sec-WebSocket-Version", WS_VERSION),),
        )
    key = headers.get("sec-websocket-key", "").strip()
    try:
        nonce = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        nonce = b""
    if len(nonce) != KEY_BYTES:
        raise bad_request("Sec-WebSocket-Key must be a base64-encoded 16-byte value")
    return key


def switching_head(key: str) -> bytes:
    """The ``101 Switching Protocols`` answer to a checked upgrade."""
    return (
        b"HTTP/1.1 101 Switching Protocols\r\n"
        b"upgrade: websocket\r\n"
        b"connection: Upgrade\r\n"
        b"sec-websocket-accept: " + accept_key(key).encode("ascii") + b"\r\n"
        b"server: syncd\r\n"
        b"\r\n"
    )


def check_room_for_one_more(server: ServerContext | None) -> None:
    """Admission, for every WebSocket upgrade (native, y-websocket, Hocuspocus):
    a 503 while the server shuts down or is at SERVICE_MAX_CONNECTIONS."""
    if server is None:
        return
    if server.closing:
        raise unavailable("server is shutting down")
    # This connection is already counted; the upgrade keeps it counted.
    if server.connection_count > server.max_connections:
        raise unavailable("too many connections")
