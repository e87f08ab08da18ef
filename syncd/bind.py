"""SERVICE_BIND: the address a node listens on, read and checked, and what its
bind's refusal is told as.

Apart from :mod:`syncd.config` so that what only needs the address (``syncd
health``, a container's health check every 10 s) does not import what the
settings' defaults come from: the engine, the Yjs library, the metrics. That
was 0.5 s of CPU a check; the standard library alone is 0.13.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket

DEFAULT_BIND = "0.0.0.0:3000"

# The longest text a number setting may be (spaces around it aside). Every
# number setting is a count, a byte size or a duration, whose sensible values
# fit in 64 bits (20 digits); a hundred characters leave room for leading
# zeros and "1_000_000" spellings. Longer text is a mistake, refused before it
# is read: Python's int() refuses more than 4300 digits itself (as few as 640
# with PYTHONINTMAXSTRDIGITS) with a message about an interpreter setting,
# and the refusal of any number would repeat every digit. Here for the port;
# syncd.config holds every other number setting to it.
MAX_NUMBER_CHARS = 100

_HOST = re.compile(r"[A-Za-z0-9._-]+")
"""A host name or IPv4 address (a space or a slash in it is a typo)."""


def host_port(host: str, port: int) -> str:
    """``host:port`` as SERVICE_BIND takes it: an IPv6 host in brackets
    (``[::1]:3000``; unbracketed, ``::1:3000`` reads as an address without a port)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


BIND_REFUSALS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.EAFNOSUPPORT})
"""Bind errors SERVICE_BIND causes: an address in use, one this machine does
not have, a port this user may not listen on, an IPv6 address on a kernel
without IPv6."""
PRIVILEGED_PORT_HINT = " (a port below 1024 needs root or CAP_NET_BIND_SERVICE)"


MISSING_ADDRESS = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT})
"""Bind errors of an address this machine does not have (or whose family its
kernel lacks): a host name's other addresses are listened on without it."""


def present_addresses(host: str) -> str | list[str]:
    """What the server listens on for SERVICE_BIND's ``host``: an address as
    written; for a host name, the addresses it resolves to that this machine
    has, as literals. ``localhost`` is also ::1 in most /etc/hosts, and with
    IPv6 switched off the bind of ::1 (so the start) was refused. The name
    itself when none is here, or it does not resolve: its bind says why."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        pass
    else:
        return host
    try:
        found = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return host
    present: list[str] = []
    for family, kind, proto, _, address in found:
        try:
            with socket.socket(family, kind, proto) as sock:
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)  # port 0: only whether the address is here
        except OSError as exc:
            if exc.errno in MISSING_ADDRESS:
                continue
        literal = str(address[0])
        scope = address[3] if len(address) == 4 else 0  # an IPv6 address's zone
        if scope:
            literal = f"{literal}%{scope}"
        if literal not in present:
            present.append(literal)
    return present or host


def ipv4_instead(port: int) -> str:
    """What an IPv6 SERVICE_BIND on a host without IPv6 is told to write."""
    return f"{host_port('0.0.0.0', port)} listens on every IPv4 address"


def bind_refusal(error: OSError, host: str, port: int) -> str | None:
    """What SERVICE_BIND's line says of a bind refused with ``error`` ("cannot
    listen on 127.0.0.1:80: Permission denied (...)"), or None when the error
    is not one the setting causes."""
    if error.errno not in BIND_REFUSALS:
        return None
    hint = ""
    if error.errno == errno.EACCES and 0 < port < 1024:
        hint = PRIVILEGED_PORT_HINT
    elif error.errno == errno.EAFNOSUPPORT:
        hint = f" (this host has no IPv6: {ipv4_instead(port)})"
    # os.strerror: the loop's own bind error carries a longer text of its own.
    return f"cannot listen on {host_port(host, port)}: {os.strerror(error.errno)}{hint}"


class NumberTooLong(ValueError):
    """A number setting's text is past :data:`MAX_NUMBER_CHARS`; the message
    says so without repeating the text."""

    def __init__(self, what: str, text: str) -> None:
        super().__init__(
            f"{what} {len(text)} characters long is no setting's number"
            f" (at most {MAX_NUMBER_CHARS} characters)"
        )


def parse_bind(value: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; raises ValueError with the reason."""
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError("expected [ipv6]:port")
        port_text = rest[1:]
        address = ipaddress.IPv6Address(host)
        if address.is_link_local and address.scope_id is None:
            # fe80::/10 is on every interface: the kernel refuses the bind
            # (EINVAL) unless told which, and only after the store is opened.
            raise ValueError(
                "a link-local address is on every interface: name one with a zone id,"
                f" as in [{host}%eth0]{rest}"
            )
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep or not host:
            raise ValueError("expected host:port")
        if ":" in host:
            raise ValueError("an IPv6 host must be written in brackets: [::1]:3000")
        if not _HOST.fullmatch(host):
            hint = " (0.0.0.0 listens on every address)" if host == "*" else ""
            raise ValueError(f"{host!r} is not a host name or address{hint}")
    if not (port_text.isascii() and port_text.isdigit()):
        raise ValueError(f"port {port_text!r} is not a number")
    if len(port_text) > MAX_NUMBER_CHARS:
        raise NumberTooLong("a port", port_text)
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is outside 0-65535")
    _check_tcp_address(host, port)
    return host, port


_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def _check_tcp_address(host: str, port: int) -> None:
    """Refuse an address literal no TCP client can connect to (ValueError):
    the IPv4 ones bound, and the node said it listened while nobody could
    reach it; the IPv6 ones failed the bind with EINVAL after the store was
    opened. A host name is left to the bind."""
    written = host.partition("%")[0]
    try:
        address = ipaddress.ip_address(written)
    except ValueError:
        return
    every = "0.0.0.0" if address.version == 4 else "[::]"
    unicast = (
        f"TCP listens on a unicast address ({every} listens on every IPv{address.version} address)"
    )
    if address.is_multicast:
        raise ValueError(f"{written} is a multicast address: {unicast}")
    if address == _BROADCAST:
        raise ValueError(f"{written} is the broadcast address: {unicast}")
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        raise ValueError(
            f"{written} is an IPv4 address in IPv6 form: write it as {host_port(str(mapped), port)}"
        )
