"""Edge cases found by driving a running server with hostile requests, both parsers."""

from __future__ import annotations

import asyncio
import re
import sys
import tracemalloc

import httpx
import pytest

from syncd.http.parser import NEED_DATA
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import ADMIN, RunningServer, open_raw, read_until_closed


def sse_active(server: RunningServer) -> float:
    value = server.app.metrics.sse_connections_active._value.get()
    return float(value)


async def test_head_on_the_event_stream_has_no_body(server: RunningServer) -> None:
    """HEAD gets the head GET would get and no body: the stream's events after
    a HEAD's head would be read by the client as the next answer."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"HEAD /v1/namespaces/app/crdts/gc:a/events HTTP/1.1\r\nHost: t\r\n"
        + f"Authorization: Bearer {ADMIN}\r\n\r\n".encode()
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 200 "), data
    assert b"content-type: text/event-stream" in head
    assert body == b""
    # No subscriber is left behind by the stream that never started.
    for _ in range(50):
        if sse_active(server) == 0:
            break
        await asyncio.sleep(0.02)
    assert sse_active(server) == 0


async def test_unpaired_surrogate_escapes_are_malformed_json(server: RunningServer) -> None:
    """``"\\ud800"`` is well-formed JSON text, but no UTF-8 string: the op was
    accepted, then could not be packed for the log, and the store went into
    its failure mode (writes refused, state rebuilt from disk) for everyone.
    A pair (an astral character, as Python's json.dumps writes it) is fine."""
    headers = {"authorization": f"Bearer {ADMIN}"}
    bad = [
        ("pn:a", b'{"op":"increment","amount":1,"op_id":"\\ud800"}'),
        ("pn:b", b'{"op":"increment","amount":1,"op_id":"a\\uDC00"}'),
        ("or:c", b'{"op":"add","element":{"\\udbff":1}}'),
        ("or:d", b'[{"op":"add","element":"x"},{"op":"add","element":["\\ude00\\ud83d"]}]'),
    ]
    async with httpx.AsyncClient(base_url=server.url) as client:
        for crdt_id, body in bad:
            r = await client.post(
                f"/v1/namespaces/app/crdts/{crdt_id}/ops",
                content=body,
                headers={**headers, "content-type": "application/json"},
            )
            assert r.status_code == 400, (body, r.text)
            assert r.json()["error"] == "bad_request"
            assert "surrogate" in r.json()["message"]
        r = await client.get("/health/ready")
        assert r.status_code == 200, r.text
        r = await client.post(
            "/v1/namespaces/app/crdts/or:ok/ops",
            content=b'{"op":"add","element":"\\ud83d\\ude00 \\u00e9"}',
            headers={**headers, "content-type": "application/json"},
        )
        assert r.status_code == 200, r.text
        r = await client.get("/v1/namespaces/app/crdts/or:ok", headers=headers)
        assert r.json()["value"] == ["\U0001f600 \u00e9"]


async def test_a_number_of_too_many_digits_is_named_as_such(server: RunningServer) -> None:
    """Python refuses to parse an integer of more than ``sys.get_int_max_str_digits()``
    digits (4300 by default); the 400 said so in the interpreter's words
    ("use sys.set_int_max_str_digits()"), which mean nothing to a client."""
    digits = sys.get_int_max_str_digits()
    headers = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=server.url) as client:
        for size in (digits + 1, digits * 3):
            body = b'{"op":"set","value":' + b"7" * size + b"}"
            r = await client.post(
                "/v1/namespaces/app/crdts/lw:n/ops", content=body, headers=headers
            )
            assert r.status_code == 400, r.text
            assert r.json() == {
                "error": "bad_request",
                "message": f"malformed JSON: a number has more than {digits} digits",
            }, r.json()


def test_a_body_of_tiny_chunks_costs_about_its_size(http_parser: str) -> None:
    """SERVICE_MAX_BODY_BYTES bounds what a request holds. A chunked body sent
    one byte per chunk was gathered as a list of one-byte bytes objects: about
    90 bytes of memory per byte of body (90 MB for a 1 MiB body, per request)."""
    parser = make_parser(http_parser, 1 << 20)
    chunks = 20_000
    parser.feed(b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert parser.next_event() is NEED_DATA
    wire = b"1\r\na\r\n" * chunks + b"0\r\n\r\n"
    tracemalloc.start()
    try:
        for at in range(0, len(wire), 8192):
            parser.feed(wire[at : at + 8192])
            event = parser.next_event()
            if isinstance(event, Request):
                break
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(event, Request) and event.body == b"a" * chunks
    assert peak < 10 * chunks, peak  # was ~90 bytes per byte


async def test_expect_continue_without_a_body_gets_no_100(server: RunningServer) -> None:
    """Both parsers alike: a 100 Continue only for a request that has a body to
    send (h11 sent one before the answer to a bodiless request, llhttp not)."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"GET /health/live HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n\r\n"
        b"POST /health/live HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    assert re.findall(rb"HTTP/1\.1 (\d+)", data) == [b"200", b"405"], data


async def test_bare_lf_in_a_chunked_body_is_400_at_once(server: RunningServer) -> None:
    """llhttp refuses a chunk line ending in a bare LF; h11 waited for a CRLF
    that never came, so the client got no answer until the header timeout."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"POST /v1/namespaces/app/crdts/gc:a/ops HTTP/1.1\r\nHost: t\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\n{}\n0\n\n"
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    assert data.startswith(b"HTTP/1.1 400 "), data


@pytest.mark.parametrize(
    ("codings", "status", "message"),
    [
        (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400, b"bad_request"),
        (b"Transfer-Encoding: GZIP\r\n", 501, b"'GZIP'"),
    ],
)
async def test_transfer_codings_are_judged_alike(
    server: RunningServer, codings: bytes, status: int, message: bytes
) -> None:
    """h11 answered a repeated Transfer-Encoding 501 (llhttp: 400, chunked
    twice is not an unknown coding) and named a refused coding in lower case
    after a space (' gzip')."""
    reader, writer = await open_raw(server.port)
    writer.write(b"POST /health/live HTTP/1.1\r\nHost: t\r\n" + codings + b"\r\n0\r\n\r\n")
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    assert data.startswith(b"HTTP/1.1 %d " % status), data
    assert message in data


@pytest.mark.parametrize("chunked", [False, True])
async def test_an_upgrade_offer_with_a_body_is_served_as_http(
    server: RunningServer, chunked: bool
) -> None:
    """An Upgrade offer we do not take (h2c, as curl --http2 sends it) leaves
    the request an ordinary one, body included (RFC 9110 7.8). llhttp skips
    the body of any request with Connection: upgrade, so with httptools the op
    was answered 400 'body is empty' and its body was then parsed as the next
    request (another 400, connection closed); h11 served it."""
    body = b'{"op":"increment","amount":1}'
    framing = (
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        if chunked
        else b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    reader, writer = await open_raw(server.port)
    writer.write(
        b"POST /v1/namespaces/app/crdts/pn:u/ops HTTP/1.1\r\nHost: t\r\n"
        + f"Authorization: Bearer {ADMIN}\r\n".encode()
        + b"Content-Type: application/json\r\nUpgrade: h2c\r\n"
        b"Connection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
        + framing
        + b"GET /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    assert re.findall(rb"HTTP/1\.1 (\d+)", data) == [b"200", b"200"], data
    assert b'"applied":1' in data and b'"status":"live"' in data


async def test_an_empty_line_after_a_request_is_ignored(server: RunningServer) -> None:
    """RFC 9112 2.2: a server SHOULD ignore empty lines before a request line
    (some clients send a CRLF after a body). h11 answered them 400 and closed
    the connection; llhttp skips them."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n\r\n"
        b"\r\nGET /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    assert re.findall(rb"HTTP/1\.1 (\d+)", data) == [b"200", b"200"], data


async def test_an_absolute_form_target_reaches_its_route(server: RunningServer) -> None:
    """RFC 9112 3.2.2: a server MUST accept the absolute-form; both parsers
    passed it on whole and the router answered 404 for every such request."""
    reader, writer = await open_raw(server.port)
    writer.write(
        b"GET http://t/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET HTTP://t:80?x=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    data = await read_until_closed(reader, timeout=5)
    writer.close()
    # The second has no path: "/", which no route serves.
    assert re.findall(rb"HTTP/1\.1 (\d+)", data) == [b"200", b"404"], data
    assert b'"status":"live"' in data
