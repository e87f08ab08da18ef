"""Token pre-validation: errors at construction, before any connection."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from syncd.auth.tokens import SigningKey
from syncd.client import (
    AsyncClient,
    Client,
    ClientConfig,
    TokenError,
    TokenExpiredError,
    TokenNamespaceError,
    TokenParseError,
)
from tests.client.conftest import make_token, now_ms


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real listening socket: any connection attempt would show in accept()."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def assert_untouched(sock: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        sock.accept()


def url(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


GARBAGE = ["", "garbage", "a.b.c", "!!!.???", "eyJ4IjoxfQ.c2ln", 12345]


@pytest.mark.parametrize("bad", GARBAGE)
@pytest.mark.parametrize("cls", [AsyncClient, Client])
def test_unparseable_token_refused_at_construction(
    cls: type[AsyncClient] | type[Client], bad: object, listener: socket.socket
) -> None:
    with pytest.raises(TokenParseError) as info:
        cls(url(listener), bad, "app")  # type: ignore[arg-type]
    assert isinstance(info.value, TokenError)
    assert not isinstance(info.value, TokenExpiredError)
    assert_untouched(listener)


@pytest.mark.parametrize("cls", [AsyncClient, Client])
def test_expired_token_refused_at_construction(
    cls: type[AsyncClient] | type[Client], listener: socket.socket
) -> None:
    # Signed with some key the client does not know: the signature is not its business.
    expired = make_token(key=SigningKey.generate(), ttl_ms=1000, issued_ms=now_ms() - 60_000)
    with pytest.raises(TokenExpiredError) as info:
        cls(url(listener), expired, "app")
    assert isinstance(info.value, TokenError)
    assert not isinstance(info.value, TokenParseError)
    assert info.value.expires_at < now_ms()
    assert_untouched(listener)


def test_expiry_is_checked_against_the_clock_at_expires_at(listener: socket.socket) -> None:
    token = make_token(ttl_ms=1000, issued_ms=10_000)  # expires_at = 11_000
    Client(url(listener), token, "app", clock_ms=lambda: 10_999).close()
    with pytest.raises(TokenExpiredError):
        Client(url(listener), token, "app", clock_ms=lambda: 11_000)
    assert_untouched(listener)


async def test_token_expiring_later_stops_requests_locally(listener: socket.socket) -> None:
    clock = [10_000]
    token = make_token(ttl_ms=1000, issued_ms=10_000)
    async with AsyncClient(url(listener), token, "app", clock_ms=lambda: clock[0]) as client:
        clock[0] = 11_000
        with pytest.raises(TokenExpiredError):
            await client.read("gc:x")
        with pytest.raises(TokenExpiredError):
            await client.gcounter_increment("gc:x")
    assert_untouched(listener)


def test_other_namespace_refused(listener: socket.socket) -> None:
    with pytest.raises(TokenNamespaceError):
        Client(url(listener), make_token(ns="other"), "app")
    assert_untouched(listener)


@pytest.mark.parametrize(
    ("base_url", "ns"),
    [("ftp://x", "app"), ("http://", "app"), ("http://x?q=1", "app"), ("http://x", "../etc")],
)
def test_bad_config_is_a_value_error(base_url: str, ns: str) -> None:
    with pytest.raises(ValueError):
        Client(base_url, make_token(), ns)


def test_config_accepts_base_url_or_baseurl() -> None:
    token = make_token()
    a = ClientConfig.from_mapping({"baseUrl": "http://h:1/", "token": token, "namespace": "app"})
    b = ClientConfig.from_mapping({"base_url": "http://h:1", "token": token, "namespace": "app"})
    assert a == b and a.base_url == "http://h:1"
    assert a.ws_url == "ws://h:1/v1/namespaces/app/ws"
    assert ClientConfig("https://h", token, "app").ws_url.startswith("wss://h/")
    env = {"SYNCD_BASE_URL": "http://h:1", "SYNCD_TOKEN": token, "SYNCD_NAMESPACE": "app"}
    assert ClientConfig.from_env(env) == a
    with pytest.raises(ValueError, match="token"):
        ClientConfig.from_mapping({"baseUrl": "http://h", "namespace": "app"})
