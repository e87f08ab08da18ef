"""A minimal HTTP/1.1 POST client on asyncio, framed by h11.

The webhook sender needs one thing: POST a small body, learn the status code.
So this client opens one connection per request (``Connection: close``), sends
the request, reads only until the status line and headers are parsed, and hangs
up. It never follows redirects (a 3xx is a non-2xx answer like any other) and
never reads a response body: the status is all a webhook delivery needs, and a
receiver streaming an endless body cannot hold a worker.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

import h11

# A webhook receiver answers with a short status line and a few headers; 16 KiB
# is generous for that and stops a hostile or broken receiver from feeding us
# an endless header block or an endless run of 1xx answers.
MAX_RESPONSE_BYTES = 16 * 1024

# One read's buffer size; a response head fits in one read almost always.
READ_CHUNK_BYTES = 4096

# After the status is known we close politely (TLS close_notify, FIN) but do not
# wait longer than this for the peer's side: the answer is already in hand.
CLOSE_TIMEOUT = 1.0

_DEFAULT_PORTS = {"http": 80, "https": 443}

# Set by this module only: a caller's copy would break the framing.
_FRAMING_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding"})

# Built lazily once: loading the system CA store costs milliseconds per call.
_default_ssl_context: ssl.SSLContext | None = None


class WebhookClientError(Exception):
    """The receiver broke the HTTP exchange (closed early, malformed or oversized answer)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed, validated webhook URL."""

    scheme: str
    host: str  # for connecting: no brackets around IPv6 literals, a zone id as "%eth0"
    port: int
    host_header: str  # as written in the URL (brackets and port kept), without a zone id
    request_target: str  # path and query
    # For logs: scheme and host only, since hook URLs often carry a secret in
    # the path (Slack-style /services/T0/B0/XXXX) or in the query string.
    safe_url: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def server_name(self) -> str:
        """The name TLS checks the certificate for: the host without a zone id."""
        return self.host.partition("%")[0]


def _shown(url: str) -> str:
    """``url`` as an error message shows it: its scheme and host only, as
    :attr:`Target.safe_url` in the logs. A refused URL's message ends up in
    the start's error line (the journal); it must hold neither the
    credentials (also refused) nor the path or query, which often carry a
    secret. Works on any text, a URL ``urlsplit`` refuses included."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "", scheme
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    host = authority.rpartition("@")[2]
    return repr(f"{scheme}{sep}{host}{'/…' if len(authority) < len(rest) else ''}")


def _scrubbed(url: str, message: str) -> str:
    """``message`` (a parser's, which may quote the URL's authority) without
    the URL's credentials."""
    rest = url.strip().partition("://")[2] or url.strip()
    userinfo = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[0]
    return message.replace(userinfo, "…") if userinfo else message


def parse_url(url: str) -> Target:
    """Parse and check a webhook URL; ValueError with a clear message when
    unusable, which shows the URL's scheme and host only (:func:`_shown`)."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("webhook URL is empty")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        # An environment value that is not UTF-8 (its bytes as surrogate escapes).
        raise ValueError("webhook URL is not valid UTF-8") from None
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(
            f"webhook URL {_shown(url)} is malformed: {_scrubbed(url, str(exc))}"
        ) from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(
            f"webhook URL must start with http:// or https://, got scheme {parts.scheme!r}"
            if parts.scheme
            else "webhook URL must start with http:// or https://"
        )
    if parts.username is not None or parts.password is not None:
        # Credentials in the URL would end up in logs and error messages; the
        # HMAC signature (SERVICE_WEBHOOK_SECRET) is the way to authenticate.
        raise ValueError(
            "webhook URL must not contain credentials (user:password@); "
            "use SERVICE_WEBHOOK_SECRET to sign requests instead"
        )
    host = parts.hostname
    if not host:
        raise ValueError(f"webhook URL {_shown(url)} has no host")
    if port == 0:
        raise ValueError(f"webhook URL {_shown(url)} has port 0")
    netloc = parts.netloc
    if "%" in host:
        host, netloc = _zoned(url, netloc)
    elif _is_link_local(host):
        # Every connect would fail (EINVAL: on which interface?), every event be dropped.
        example = f"{scheme}://[{host}%25eth0]" + (f":{port}" if port is not None else "")
        raise ValueError(
            f"webhook URL {_shown(url)} is a link-local address, which is on every"
            f" interface: name one with a zone id, as in {example}/…"
        )
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    if any(c in target for c in " \r\n\t"):
        raise ValueError(f"webhook URL {_shown(url)} has whitespace in its path")
    if any(c.isspace() for c in netloc):
        # No host name holds one: every event would fail its lookup, be retried and dropped.
        raise ValueError(f"webhook URL {_shown(url)} has whitespace in its host")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in netloc + target):
        raise ValueError(f"webhook URL {_shown(url)} has a control character")
    if not netloc.isascii():
        # An internationalized host name goes on the wire in its IDNA form,
        # as it is looked up; a request head is ASCII.
        try:
            ascii_host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ValueError(
                f"webhook URL {_shown(url)} has a host name IDNA cannot encode: "
                f"{_scrubbed(url, str(exc))}"
            ) from None
        host = ascii_host
        netloc = ascii_host if parts.port is None else f"{ascii_host}:{parts.port}"
    if not target.isascii():
        # Percent-encode what is not ASCII (as UTF-8), as a browser would.
        target = quote(target, safe="".join(chr(c) for c in range(0x21, 0x7F)))
    return Target(
        scheme=scheme,
        host=host,
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        host_header=netloc,
        request_target=target,
        # A zone id stays in the logs: which interface was meant is the operator's to see.
        safe_url=f"{scheme}://{parts.netloc if '%' in host else netloc}",
    )


_ZONE = re.compile(r"\[([0-9A-Fa-f:.]+)%([^\]]*)\]")
"""An IPv6 literal with a zone id in a URL's authority: its address and zone."""


def _zoned(url: str, netloc: str) -> tuple[str, str]:
    """The host to connect to and the Host header's authority of a link-local
    IPv6 address with a zone id (``[fe80::1%25eth0]``, RFC 6874). The zone is
    percent-decoded ("%25" is "%"): left encoded, getaddrinfo refuses it (on
    asyncio's loop; uvloop took it). It names an interface of this host, so
    it is left out of the Host header (RFC 6874, section 4) and must name one
    that exists here, or every event would fail its connect, be retried and
    dropped."""
    found = _ZONE.search(netloc)
    if found is None:
        raise ValueError(f"webhook URL {_shown(url)} has a '%' outside an IPv6 zone id")
    address, raw_zone = found.groups()
    zone = unquote("%" + raw_zone)[1:]  # "%25eth0" -> "eth0"; a bare "%eth0" as written
    if not zone:
        raise ValueError(f"webhook URL {_shown(url)} has an empty IPv6 zone id")
    if not _is_interface(zone):
        raise ValueError(
            f"webhook URL {_shown(url)} has zone id {zone!r},"
            " which names no network interface of this host"
        )
    host = f"{address}%{zone}"
    try:
        # Numeric only: no lookup, the system's own verdict on the zone (glibc
        # takes a zone name on a link-local or multicast address only).
        socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except OSError as exc:
        raise ValueError(
            f"webhook URL {_shown(url)} cannot be connected to with its zone id:"
            f" {exc.strerror or exc}"
        ) from None
    return host, netloc[: found.start()] + f"[{address}]" + netloc[found.end() :]


def _is_link_local(host: str) -> bool:
    try:
        return ipaddress.IPv6Address(host).is_link_local
    except ValueError:  # a name or an IPv4 address
        return False


def _is_interface(zone: str) -> bool:
    """Whether ``zone`` is the name or index of a network interface here
    (True where the platform cannot say)."""
    try:
        interfaces = socket.if_nameindex()
    except (AttributeError, OSError):
        return True
    return any(zone in (name, str(index)) for index, name in interfaces)


def validate_url(url: str) -> None:
    """Raise ValueError with a clear message when ``url`` cannot be a webhook URL."""
    parse_url(url)


def _default_context() -> ssl.SSLContext:
    global _default_ssl_context
    if _default_ssl_context is None:
        _default_ssl_context = ssl.create_default_context()
    return _default_ssl_context


def new_connection() -> h11.Connection:
    return h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_BYTES)


def build_request(
    conn: h11.Connection, target: Target, body: bytes, headers: Sequence[tuple[str, str]]
) -> bytes:
    """The request bytes: our framing headers first, then the caller's others."""
    own = [
        ("Host", target.host_header),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    extra = [(k, v) for k, v in headers if k.lower() not in _FRAMING_HEADERS]
    parts = [
        conn.send(h11.Request(method="POST", target=target.request_target, headers=own + extra)),
        conn.send(h11.Data(data=body)),
        conn.send(h11.EndOfMessage()),
    ]
    return b"".join(p for p in parts if p)


async def read_status(conn: h11.Connection, reader: asyncio.StreamReader) -> int:
    """Read until the final response's status is known; at most MAX_RESPONSE_BYTES."""
    received = 0
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if received > MAX_RESPONSE_BYTES:
                    raise WebhookClientError(f"response head exceeds {MAX_RESPONSE_BYTES} bytes")
                chunk = await reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    raise WebhookClientError("connection closed before a response")
                received += len(chunk)
                conn.receive_data(chunk)
            elif isinstance(event, h11.Response):
                return int(event.status_code)
            # InformationalResponse (1xx): keep reading for the final answer.
    except h11.RemoteProtocolError as exc:
        raise WebhookClientError(f"malformed response: {exc}") from None


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await writer.wait_closed()
    except (TimeoutError, OSError):
        writer.transport.abort()


async def post(
    url: str,
    body: bytes,
    headers: Sequence[tuple[str, str]],
    *,
    connect_timeout: float,
    total_timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> int:
    """POST ``body`` to ``url`` and return the response status code.

    Raises ValueError for an unusable URL, TimeoutError when the connection
    (TCP and TLS handshake) takes over ``connect_timeout`` or the whole exchange
    over ``total_timeout``, OSError (ssl.SSLError included) for connection
    failures and WebhookClientError for a broken answer. ``Host``,
    ``Content-Length`` and ``Connection`` are set here; the caller's copies of
    framing headers are ignored.
    """
    target = parse_url(url)
    conn = new_connection()
    request = build_request(conn, target, body, headers)
    context = (ssl_context or _default_context()) if target.tls else None
    async with asyncio.timeout(total_timeout):
        async with asyncio.timeout(connect_timeout):
            reader, writer = await asyncio.open_connection(
                target.host,
                target.port,
                ssl=context,
                server_hostname=target.server_name if context is not None else None,
                limit=MAX_RESPONSE_BYTES,
            )
        try:
            writer.write(request)
            await writer.drain()
            status = await read_status(conn, reader)
        except BaseException:
            # Failed, timed out or cancelled: no point in a polite goodbye.
            writer.transport.abort()
            raise
    await _close(writer)
    return status
