"""render: the usual answer's shortcut writes the bytes the general path writes."""

from __future__ import annotations

import pytest

from syncd.http.response import JSON_TYPE, Response, date_header, render


@pytest.mark.parametrize("body", [b"", b'{"ok":true,"seq":1,"applied":1}', b"x" * 70_000])
@pytest.mark.parametrize("content_type", [JSON_TYPE, b"text/plain; charset=utf-8"])
def test_a_plain_200_is_the_general_head(body: bytes, content_type: bytes) -> None:
    shortcut = render(Response(200, body, content_type), keep_alive=True)
    expected = (
        b"HTTP/1.1 200 OK\r\nserver: syncd\r\n"
        + date_header()
        + b"content-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    assert shortcut == expected


def test_what_the_shortcut_leaves_to_the_general_path() -> None:
    body = b"{}"
    head = render(Response(200, body), keep_alive=False)
    assert head.endswith(b"connection: close\r\n\r\n{}")
    assert render(Response(200, body), keep_alive=True, head_only=True).endswith(b"\r\n\r\n")
    with_header = render(Response(200, body, headers=((b"x-a", b"1"),)), keep_alive=True)
    assert b"\r\nx-a: 1\r\n\r\n{}" in with_header
    extra = render(Response(200, body), keep_alive=True, extra=((b"x-b", b"2"),))
    assert b"\r\nx-b: 2\r\n\r\n{}" in extra
    no_type = render(Response(200, body, None), keep_alive=True)
    assert b"content-type" not in no_type and no_type.endswith(b"content-length: 2\r\n\r\n{}")
