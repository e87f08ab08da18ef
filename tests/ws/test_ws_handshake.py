"""The handshake checks and the accept key, without sockets."""

from __future__ import annotations

import pytest

from syncd.errors import ApiError
from syncd.ws.handshake import accept_key, check_upgrade, switching_head

GOOD = {
    "upgrade": "websocket",
    "connection": "keep-alive, Upgrade",
    "sec-websocket-version": "13",
    "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def test_accept_key_matches_rfc_6455_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_good_request_gives_its_key_and_a_101_head() -> None:
    key = check_upgrade("1.1", GOOD)
    assert key == GOOD["sec-websocket-key"]
    head = switching_head(key)
    assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in head
    assert head.endswith(b"\r\n\r\n")


def test_header_tokens_are_case_insensitive() -> None:
    headers = dict(GOOD, upgrade="WebSocket", connection="UPGRADE")
    assert check_upgrade("1.1", headers) == GOOD["sec-websocket-key"]


@pytest.mark.parametrize(
    ("version", "change", "needle"),
    [
        ("1.0", {}, "HTTP/1.1"),
        ("1.1", {"upgrade": "h2c"}, "Upgrade"),
        ("1.1", {"connection": "keep-alive"}, "Connection"),
        ("1.1", {"sec-websocket-version": "8"}, "Version"),
        ("1.1", {"sec-websocket-key": "not base64!"}, "Key"),
        ("1.1", {"sec-websocket-key": "AAAA"}, "Key"),  # 3 bytes, not 16
    ],
)
def test_bad_requests_are_400(version: str, change: dict[str, str], needle: str) -> None:
    with pytest.raises(ApiError) as info:
        check_upgrade(version, dict(GOOD, **change))
    assert info.value.status == 400 and needle in info.value.message


def test_wrong_version_names_the_supported_one() -> None:
    with pytest.raises(ApiError) as info:
        check_upgrade("1.1", dict(GOOD, **{"sec-websocket-version": "7"}))
    assert ("Sec-WebSocket-Version", "13") in info.value.headers
