"""Methods the server does not recognise (501), and ``OPTIONS *`` (200 with
the server's methods), over a real socket with both parsers: the same bytes
from each but the date."""

from __future__ import annotations

import json

import pytest

from syncd.http.parser import NEED_DATA, ParseError
from syncd.http.parsers import make_parser
from syncd.http.request import Request
from tests.conftest import RunningServer, open_raw, read_response

HOST = b"Host: t\r\n"

NOT_IMPLEMENTED = [
    # (request line, the method named in the message, case hint)
    (b"get /v1/namespaces/app/crdts/gc:x HTTP/1.1", "get", True),
    (b"post /v1/namespaces/app/crdts/gc:x/ops HTTP/1.1", "post", True),
    (b"FOO /health/live HTTP/1.1", "FOO", False),
    (b"BREW /nope HTTP/1.1", "BREW", False),  # not a route either: the method is judged first
    (b"GETX /health/live HTTP/1.1", "GETX", False),  # a known method's prefix (llhttp reads on)
    (b"DESCRIBE /health/live HTTP/1.1", "DESCRIBE", False),  # RTSP's, refused later by llhttp
    (b"PRI /health/live HTTP/1.1", "PRI", False),  # HTTP/2's, outside its preface
]


async def test_an_unknown_method_is_501_not_implemented(server: RunningServer) -> None:
    for line, method, case_hint in NOT_IMPLEMENTED:
        reader, writer = await open_raw(server.port)
        writer.write(line + b"\r\n" + HOST + b"\r\n")
        status, headers, body = await read_response(reader)
        hint = " (methods are case-sensitive)" if case_hint else ""
        assert (status, json.loads(body)) == (
            501,
            {"error": "not_implemented", "message": f"method {method} is not implemented{hint}"},
        ), line
        assert headers["connection"] == "close"
        assert headers["content-type"] == "application/json"
        assert await reader.read() == b""
        writer.close()


async def test_the_whole_head_is_judged_before_the_method(server: RunningServer) -> None:
    """An unknown method does not hide a malformed request: 400 as for any
    other (llhttp refuses at the method; the rest of the head decides)."""
    for data in (
        b"get /health/live HTTP/1.1\r\n\r\n",  # no Host
        b"get /health/live HTTP/1.1\r\nBad[H]: x\r\n" + HOST + b"\r\n",
        b"FOO /a b HTTP/1.1\r\n" + HOST + b"\r\n",
        b"\x01OO /health/live HTTP/1.1\r\n" + HOST + b"\r\n",
    ):
        reader, writer = await open_raw(server.port)
        writer.write(data)
        status, headers, body = await read_response(reader)
        assert (status, json.loads(body)["error"]) == (400, "bad_request"), (data, body)
        assert headers["connection"] == "close"
        writer.close()


async def test_an_unknown_method_in_a_pipeline_or_split_over_reads(
    server: RunningServer,
) -> None:
    """Requests before it are answered; then the 501, wherever in a read the
    unknown method starts (llhttp gives no offset of the request it refuses)."""
    post = b"POST /health/live HTTP/1.1\r\n" + HOST + b"Content-Length: 3\r\n\r\nabc"
    live = b"GET /health/live HTTP/1.1\r\n" + HOST + b"\r\n"
    unknown = b"FOO /health/live HTTP/1.1\r\n" + HOST + b"\r\n"
    for reads, before in (
        ([live + post + b"\r\n" + unknown + live], [200, 405]),
        ([live + b"fo", b"o /health/live HTTP/1.1\r\nHo", b"st: t\r\n\r\n"], [200]),
    ):
        reader, writer = await open_raw(server.port)
        for data in reads:
            writer.write(data)
            await writer.drain()
        statuses = [(await read_response(reader))[0] for _ in before]
        assert statuses == before
        status, headers, body = await read_response(reader)
        assert (status, json.loads(body)["error"]) == (501, "not_implemented"), body
        assert await reader.read() == b""  # nothing after it is answered
        writer.close()


async def test_options_asterisk_names_the_server_methods(server: RunningServer) -> None:
    methods = {method for method, _ in server.app.router.routes} | {"HEAD", "OPTIONS"}
    reader, writer = await open_raw(server.port)
    writer.write(b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n")
    status, headers, body = await read_response(reader)
    assert (status, body, headers["content-length"]) == (200, b"", "0")
    assert headers["allow"] == ", ".join(sorted(methods))
    assert {"GET", "HEAD", "POST", "DELETE", "OPTIONS"} <= set(headers["allow"].split(", "))
    assert "content-type" not in headers
    # kept alive: the next request on the connection is served
    writer.write(b"GET /health/live HTTP/1.1\r\n" + HOST + b"\r\n")
    assert (await read_response(reader))[0] == 200
    # every other method with * is refused, as before
    for line in (b"GET * HTTP/1.1", b"POST * HTTP/1.1", b"DELETE * HTTP/1.1"):
        writer.write(line + b"\r\n" + HOST + b"Content-Length: 0\r\n\r\n")
        status, _, body = await read_response(reader)
        assert (status, json.loads(body)) == (
            400,
            {"error": "bad_request", "message": "the target * is only for OPTIONS"},
        ), line
    writer.close()


async def test_a_known_method_no_route_takes_stays_405(server: RunningServer) -> None:
    reader, writer = await open_raw(server.port)
    writer.write(b"PATCH /health/live HTTP/1.1\r\n" + HOST + b"\r\n")
    status, headers, body = await read_response(reader)
    assert (status, json.loads(body)["error"], headers["allow"]) == (
        405,
        "method_not_allowed",
        "GET, HEAD",
    )
    writer.write(b"PROPFIND /nope HTTP/1.1\r\n" + HOST + b"\r\n")
    assert (await read_response(reader))[0] == 404
    writer.close()


LIVE = b"GET /health/live HTTP/1.1\r\n" + HOST + b"\r\n"
POST = b"POST /b HTTP/1.1\r\n" + HOST + b"Content-Length: 3\r\n\r\nABC"
GETX = (501, "method GETX is not implemented")
FOO = (501, "method FOO is not implemented")
SPLIT_READS: list[tuple[str, list[bytes], object]] = [
    (
        "at the first byte",
        [b"fo", b"o /x HTTP/1.1\r\n" + HOST + b"\r\n"],
        (501, "method foo is not implemented"),
    ),
    ("inside a known prefix", [b"GE", b"TX /x HTTP/1.1\r\n" + HOST + b"\r\n"], GETX),
    ("byte by byte", [bytes([c]) for c in b"GETX /x HTTP/1.1\r\n" + HOST + b"\r\n"], GETX),
    ("after a pipeline", [LIVE + POST + b"GE", b"TX /x HTTP/1.1\r\n" + HOST + b"\r\n"], GETX),
    (
        "over three reads",
        [LIVE + POST + b"\r\nG", b"E", b"TX /x HTTP/1.1\r\n" + HOST + b"\r\n"],
        GETX,
    ),
    (
        "refused at the version",
        [POST + b"SETUP ", b"/x HTTP/1.1\r\n" + HOST + b"\r\n"],
        (501, "method SETUP is not implemented"),
    ),
    ("after a body split over reads", [POST[:-2], b"BCFOO /x HTTP/1.1\r\n" + HOST + b"\r\n"], FOO),
    (
        "after a body, then split",
        [POST[:-2], b"BC\r\nGE", b"TX /x HTTP/1.1\r\n" + HOST + b"\r\n"],
        GETX,
    ),
    ("a known method split", [LIVE + b"GE", b"T /x HTTP/1.1\r\n" + HOST + b"\r\n"], ("GET", "/x")),
]


def events(parser_name: str, reads: list[bytes]) -> list[object]:
    """What a parser makes of ``reads``: (method, path) per request, then the refusal."""
    parser = make_parser(parser_name, 1000)
    seen: list[object] = []
    for data in reads:
        parser.feed(data)
        while (event := parser.next_event()) is not NEED_DATA:
            if isinstance(event, ParseError):
                return [*seen, (event.status, event.message)]
            assert isinstance(event, Request)
            seen.append((event.method, event.path))
            parser.start_next_cycle()
    return seen


@pytest.mark.parametrize(("name", "reads", "last"), SPLIT_READS, ids=[c[0] for c in SPLIT_READS])
def test_a_method_split_over_reads_gets_the_same_answer(
    name: str, reads: list[bytes], last: object
) -> None:
    """llhttp refuses the method in a later read than the one its request
    began in (and says nowhere where that was): the answer is still h11's."""
    expected = events("h11", reads)
    assert expected[-1] == last
    assert events("httptools", reads) == expected
