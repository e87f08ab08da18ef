"""The access log (``SERVICE_ACCESS_LOG``): one line per answered request.

Each line names the client (its address after the trusted proxies,
``SERVICE_TRUSTED_PROXIES``), the method, the path with its query, the status
and the time from the whole request read to the answer written (for event
streams and WebSocket upgrades, to the answer's head). Tokens never appear:
the only place a request may carry one outside its headers, which are not
logged, is the ``?token=`` of a URL (browsers' ``EventSource`` and WebSocket
cannot set headers), and its value is replaced before the line is written.

Lines go to the ``syncd.access`` logger at INFO, which is kept at INFO while
the log is on, whatever ``SERVICE_LOG_LEVEL`` says.
"""

from __future__ import annotations

import logging
from typing import Final
from urllib.parse import unquote_plus

from syncd.http.request import Request

log = logging.getLogger("syncd.access")

REDACTED: Final = "[redacted]"
SECRET_PARAMETERS: Final = frozenset({"token", "access_token"})
"""Query parameters whose values are credentials."""


def redact_query(query: str) -> str:
    """``query`` with the value of every secret parameter replaced. Names are
    compared as the server decodes them (``%74oken`` is ``token`` to it, and
    authenticates), so the shortcut for queries that hold no secret must not
    skip one whose name is percent-encoded."""
    if "%" not in query and "token" not in query.lower():
        return query
    parts = []
    for part in query.split("&"):
        name, sep, _ = part.partition("=")
        if unquote_plus(name).strip().lower() in SECRET_PARAMETERS:
            part = f"{name}={REDACTED}" if sep else part
        parts.append(part)
    return "&".join(parts)


class AccessLog:
    """Called with each answered request (``ServerContext.on_request``)."""

    def __init__(self) -> None:
        log.setLevel(logging.INFO)

    def __call__(self, request: Request, status: int, seconds: float) -> None:
        target = request.path
        if request.query_string:
            target = f"{target}?{redact_query(request.query_string)}"
        if not target.isprintable():  # one request, one line, whatever it asked for
            target = target.encode("unicode_escape").decode("ascii")
        log.info(
            "%s %s %s %d %.1fms",
            request.client or "-",
            request.method,
            target,
            status,
            seconds * 1000,
        )
