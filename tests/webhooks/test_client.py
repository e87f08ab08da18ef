from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator

import pytest

from syncd.webhooks import client
from syncd.webhooks.client import WebhookClientError, parse_url, post, validate_url
from tests.webhooks.webhook_receiver import Certs, Receiver

MakeReceiver = Callable[..., Awaitable[Receiver]]
# asyncio fires a timer when it is due within the clock's resolution, so a
# measured wait can come out a hair under its limit in float arithmetic.
EPS = 1e-3


# --- URL validation ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/hook", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("example.com/hook", "http:// or https://"),
        ("", "empty"),
        ("   ", "empty"),
        ("http://", "no host"),
        ("http:///path", "no host"),
        ("http://example.com:99999/", "malformed"),
        ("http://example.com:port/", "malformed"),
        ("http://example.com:0/", "port 0"),
        ("https://user:pw@example.com/", "credentials"),
        ("http://example.com/a b", "whitespace"),
    ],
)
def test_validate_url_refuses_with_a_clear_message(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        validate_url(url)


def test_parse_url_defaults_and_keeps_the_query() -> None:
    t = parse_url("HTTPS://Example.com/hooks/in?token=abc")
    assert (t.scheme, t.host, t.port, t.tls) == ("https", "example.com", 443, True)
    assert t.request_target == "/hooks/in?token=abc"
    assert t.host_header == "Example.com"
    assert t.safe_url == "https://Example.com"  # logs see neither path nor query
    t = parse_url("http://[::1]:8080")
    assert (t.host, t.port, t.host_header, t.request_target) == ("::1", 8080, "[::1]:8080", "/")
    assert parse_url("http://h").port == 80


async def test_post_refuses_a_bad_scheme_before_connecting() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        await post("gopher://x/", b"", [], connect_timeout=1, total_timeout=1)


# --- the exchange -----------------------------------------------------------


async def test_post_sends_a_framed_request_and_returns_the_status(
    make_receiver: MakeReceiver,
) -> None:
    r = await make_receiver(fail_first=1, fail_status=503)
    body = b'{"x":"\xc3\xa9"}'
    url = r.url_for("127.0.0.1", "/in/hook?a=1&b=2")
    headers = [("Content-Type", "application/json"), ("X-Extra", "1")]
    assert await post(url, body, headers, connect_timeout=2, total_timeout=5) == 503
    assert await post(url, body, headers, connect_timeout=2, total_timeout=5) == 200
    got = r.requests[0]
    assert (got.method, got.target, got.body) == ("POST", "/in/hook?a=1&b=2", body)
    assert got.header("host") == f"127.0.0.1:{r.port}"
    assert got.header("content-length") == str(len(body))
    assert got.header("connection") == "close"
    assert got.header("content-type") == "application/json"
    assert got.header("x-extra") == "1"
    assert r.connections == 2  # one connection per request


async def test_caller_framing_headers_are_ignored(make_receiver: MakeReceiver) -> None:
    r = await make_receiver()
    headers = [("Host", "evil"), ("content-length", "999"), ("Transfer-Encoding", "chunked")]
    assert await post(r.url, b"abc", headers, connect_timeout=2, total_timeout=5) == 200
    got = r.requests[0]
    assert got.header("host") == f"127.0.0.1:{r.port}"
    assert got.header("content-length") == "3"
    assert got.header("transfer-encoding") is None
    assert got.body == b"abc"


async def test_informational_answers_are_skipped(make_receiver: MakeReceiver) -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
    r = await make_receiver(raw_answer=raw)
    assert await post(r.url, b"{}", [], connect_timeout=2, total_timeout=5) == 204


async def test_refused_connection_raises_oserror(dead_url: str) -> None:
    with pytest.raises(OSError):
        await post(dead_url, b"{}", [], connect_timeout=2, total_timeout=5)


async def test_close_before_answer_raises(make_receiver: MakeReceiver) -> None:
    r = await make_receiver(raw_answer=b"")
    task = asyncio.create_task(post(r.url, b"{}", [], connect_timeout=2, total_timeout=5))
    await r.wait_for(1)
    await r.close()  # hang up without a word
    with pytest.raises(WebhookClientError, match="closed before a response"):
        await task


async def test_malformed_answer_raises(make_receiver: MakeReceiver) -> None:
    r = await make_receiver(raw_answer=b"SMTP ready\r\n\r\n")
    with pytest.raises(WebhookClientError, match="malformed"):
        await post(r.url, b"{}", [], connect_timeout=2, total_timeout=5)


async def test_oversized_answer_head_is_cut_at_the_cap(make_receiver: MakeReceiver) -> None:
    # Headers that never end: the client stops at MAX_RESPONSE_BYTES, not at the timeout.
    pad = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    raw = b"HTTP/1.1 200 OK\r\n" + pad * (client.MAX_RESPONSE_BYTES // len(pad) + 4)
    r = await make_receiver(raw_answer=raw)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(WebhookClientError):
        await post(r.url, b"{}", [], connect_timeout=2, total_timeout=10)
    assert loop.time() - start < 5


async def test_a_head_just_under_the_cap_is_read(make_receiver: MakeReceiver) -> None:
    pad = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    n = (client.MAX_RESPONSE_BYTES - 200) // len(pad)
    raw = b"HTTP/1.1 202 Accepted\r\n" + pad * n + b"\r\n"
    assert len(raw) < client.MAX_RESPONSE_BYTES
    r = await make_receiver(raw_answer=raw)
    assert await post(r.url, b"{}", [], connect_timeout=2, total_timeout=5) == 202


async def test_total_timeout_against_a_stalled_receiver(make_receiver: MakeReceiver) -> None:
    r = await make_receiver(stall=True)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        await post(r.url, b"{}", [], connect_timeout=2, total_timeout=0.3)
    elapsed = loop.time() - start
    assert 0.3 - EPS <= elapsed < 1.5
    assert len(r.requests) == 1  # it did arrive; only the answer was missing


@pytest.fixture
def unaccepting_url() -> Iterator[str]:
    """A listener whose accept queue is full: the kernel drops further SYNs,
    so a connect hangs until the client gives up."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
    yield f"http://127.0.0.1:{port}/"
    for s in fillers:
        s.close()
    listener.close()


async def test_connect_timeout(unaccepting_url: str) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        await post(unaccepting_url, b"{}", [], connect_timeout=0.2, total_timeout=10)
    elapsed = loop.time() - start
    assert 0.2 - EPS <= elapsed < 1.5  # the connect limit, not the total one


# --- https ------------------------------------------------------------------


async def test_https_with_a_trusted_self_signed_cert(
    make_receiver: MakeReceiver, certs: Certs
) -> None:
    r = await make_receiver(ssl_context=certs.server_context())
    url = r.url_for("localhost")
    status = await post(
        url, b'{"a":1}', [], connect_timeout=2, total_timeout=5, ssl_context=certs.client_context()
    )
    assert status == 200
    assert r.requests[0].body == b'{"a":1}'
    assert r.requests[0].header("host") == f"localhost:{r.port}"


async def test_https_refuses_an_untrusted_cert(make_receiver: MakeReceiver, certs: Certs) -> None:
    r = await make_receiver(ssl_context=certs.server_context())
    with pytest.raises(ssl.SSLCertVerificationError):
        await post(r.url_for("localhost"), b"{}", [], connect_timeout=2, total_timeout=5)
    assert r.requests == []


async def test_https_checks_the_host_name(make_receiver: MakeReceiver, certs: Certs) -> None:
    # The cert names only localhost: reaching it as 127.0.0.1 must fail the check,
    # which shows server_hostname carries the URL's host.
    r = await make_receiver(ssl_context=certs.server_context())
    with pytest.raises(ssl.SSLCertVerificationError, match=r"IP address mismatch|hostname"):
        await post(
            r.url_for("127.0.0.1"),
            b"{}",
            [],
            connect_timeout=2,
            total_timeout=5,
            ssl_context=certs.client_context(),
        )
    assert r.requests == []
