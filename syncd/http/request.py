"""The request object handlers receive, and the JSON body rules (docs/http-api.md#conventions)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qs, parse_qsl

from syncd.errors import ApiError, bad_request

JSON_MEDIA_TYPE = "application/json"
# Python's json module recurses per nesting level; far below the interpreter's
# recursion limit we refuse deeper documents ourselves (SERVICE_JSON_MAX_DEPTH).
DEFAULT_MAX_DEPTH = 64


class Request:
    """A complete HTTP request (head and body), as either parser delivers it."""

    __slots__ = (
        "_query",
        "body",
        "client",
        "expect_continue",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "params",
        "path",
        "principal",
        "query_string",
        "route",
        "started",
        "upgrade",
    )

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str,
        headers: dict[str, str],
        body: bytes,
        http_version: str,
        keep_alive: bool,
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers
        self.body = body
        self.http_version = http_version
        self.keep_alive = keep_alive
        self.params: dict[str, str] = {}
        self._query: dict[str, str] | None = None
        self.expect_continue = False
        upgrade = headers.get("upgrade")
        self.upgrade = upgrade.lower() if upgrade else ""
        self.client = ""
        """The peer's IP address (set by the connection; empty when unknown)."""
        self.route = "none"
        """The matched route's class (syncd.http.router.route_class), for metrics."""
        self.principal: Any = None
        """Who the route's guard authenticated before a ``100 Continue``
        (``syncd.auth.authenticator.Principal``; None: no guard ran), so the
        handler neither authenticates again nor counts the rate twice."""
        self.started = 0.0
        """``time.perf_counter()`` when the whole request had been read: the
        loop's clock (uvloop's) counts whole milliseconds, too coarse for the
        latency histogram and the access log, where a read takes a tenth of one."""

    @property
    def query(self) -> dict[str, str]:
        """Query parameters, the first value of each name."""
        if self._query is None:
            try:
                parsed = parse_qs(self.query_string, keep_blank_values=True, errors="strict")
            except (UnicodeDecodeError, ValueError):
                raise bad_request("query string is not valid UTF-8 percent-encoding") from None
            self._query = {k: v[0] for k, v in parsed.items()}
        return self._query

    def known_query(self, names: Collection[str]) -> dict[str, str]:
        """:attr:`query`, after a 400 ``bad_request`` (``NAME: given more than
        once``) for any of ``names`` given more than once, since which one was
        meant is a guess (and a proxy or log filter may have read the other).
        Other names may repeat: a route ignores what it does not know (a cache
        buster)."""
        if not self.query_string:
            return {}
        query = self.query
        # Each non-empty piece is one parameter: no more pieces than names, no repeat.
        if sum(1 for piece in self.query_string.split("&") if piece) > len(query):
            counts = Counter(key for key, _ in parse_qsl(self.query_string, keep_blank_values=True))
            for name in names:
                if counts[name] > 1:
                    raise bad_request(f"{name}: given more than once")
        return query

    def json(self, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
        """The body as JSON: 415 for another media type, 400 for malformed or too deep."""
        media = self.headers.get("content-type", "")
        if media == JSON_MEDIA_TYPE:  # most requests: no parameters, no case to fold
            return parse_json(self.body, max_depth)
        media = media.split(";", 1)[0].strip().lower()
        if media != JSON_MEDIA_TYPE and not (
            media.startswith("application/") and media.endswith("+json")
        ):
            raise ApiError(415, "unsupported_media_type", "body must be application/json")
        return parse_json(self.body, max_depth)


def decimal_digits(text: str) -> str | None:
    """A query number's significant digits: ``text`` without its leading
    zeros ("0" for zeros alone), or None when it is not ASCII decimal digits.
    Bounds on digits apply to this, so leading zeros are taken however many
    there are, as the parsers take them in Content-Length (RFC 9112 allows
    them there); the length is checked before ``int()`` sees the text."""
    if not (text.isascii() and text.isdigit()):
        return None
    return text.lstrip("0") or "0"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every request: json.loads with keyword arguments builds a
# new decoder per call, a measurable share of a small request's cost.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
"""The decoder's scanner (C): what ``JSONDecoder.decode`` calls, without its
Python around it (two whitespace matches, ``raw_decode``): half the cost."""


def parse_json(data: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Strict JSON: no NaN/Infinity, valid UTF-8, nesting at most ``max_depth``."""
    if not data:
        raise bad_request("body is empty")
    # Cheap bound before parsing: a document can be no deeper than its count of
    # opening brackets, so only bracket-heavy bodies pay for the exact check.
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if (
        len(raw) > max_depth  # no deeper than its length: a small op needs no count
        and raw.count(b"[") + raw.count(b"{") > max_depth
        and _depth_exceeds(raw, max_depth)
    ):
        raise bad_request(f"JSON nesting deeper than {max_depth}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = _decode(text)
    except RecursionError:
        raise bad_request(f"JSON nesting deeper than {max_depth}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, ValueError) and "int_max_str_digits" in str(exc):
            # Python's own guard against quadratic int parsing; its message
            # names an interpreter setting, which means nothing to a client.
            limit = sys.get_int_max_str_digits()
            raise bad_request(f"malformed JSON: a number has more than {limit} digits") from None
        raise bad_request(f"malformed JSON: {exc}") from None
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None and _has_lone_surrogate(value):
        raise bad_request("malformed JSON: a string holds an unpaired surrogate (\\ud800-\\udfff)")
    return value


# The escape of a UTF-16 surrogate. JSON text may write one alone ("\\ud800"),
# and the decoder gives a str no UTF-8 can encode: accepted, it fails later,
# where the op is packed for the log. A pair (an astral character, as
# json.dumps writes it by default) decodes to one character and is fine.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_STRICT_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)


def _has_lone_surrogate(value: Any) -> bool:
    try:
        _STRICT_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _decode(text: str) -> Any:
    """``_DECODER.decode(text)``: the scanner alone for a document that starts
    and ends with its own brackets (every op body); anything else, and every
    error, through ``decode`` itself, so the messages are its own."""
    if text[0] in "{[":
        try:
            value, end = _SCAN(text, 0)
        except (ValueError, StopIteration):
            pass  # decode() again, for its exact message
        else:
            if end == len(text):
                return value
    return _DECODER.decode(text)


# Strings may hold brackets that do not nest; JSON escapes are a backslash and
# one character (``\\uXXXX`` continues with plain hex digits).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _depth_exceeds(raw: bytes, max_depth: int) -> bool:
    # Strings out and everything but brackets dropped, in C; only the brackets
    # are walked in Python (a 100-op batch: ~200 steps instead of ~3,000).
    # Without escapes every other quote-delimited piece is a string, and
    # splitting is much cheaper than the regular expression.
    outside = _JSON_STRING.sub(b"", raw) if b"\\" in raw else b"".join(raw.split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in brackets:
        if byte == 0x5B or byte == 0x7B:
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False
