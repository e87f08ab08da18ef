"""A webhook URL to a link-local IPv6 address with its zone id, written as
RFC 6874 says ("http://[fe80::1%25eth0]:8080/hook": the "%" percent-encoded),
was taken at start and then failed every delivery on asyncio's own loop: the
host went to getaddrinfo as "fe80::1%25eth0", which it does not resolve
(uvloop happened to take it). The zone id is now decoded for connecting, on
both loops, and left out of the Host header (RFC 6874: it has meaning on this
host only); a zone that names no interface is refused at start."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import h11
import pytest
import uvloop

from syncd.webhooks import client
from tests.conftest import SIGNING_KEY_HEX

LINK_SCOPE = "20"
"""/proc/net/if_inet6's scope of a link-local address."""


def link_local_address() -> tuple[str, str] | None:
    """A link-local IPv6 address of this host and its interface, or None."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            hex_address, _, _, scope, _, interface = line.split()
            if scope == LINK_SCOPE:
                return str(ipaddress.IPv6Address(int(hex_address, 16))), interface
    return None


FOUND = link_local_address()
needs_link_local = pytest.mark.skipif(FOUND is None, reason="no link-local IPv6 address here")


async def deliver_one(address: str, interface: str) -> tuple[int, str]:
    """POST to a receiver on ``address%interface`` through the URL with the
    encoded zone; the status and the Host header it got."""
    hosts: list[str] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while (event := conn.next_event()) is h11.NEED_DATA:
                conn.receive_data(await reader.read(4096))
            assert isinstance(event, h11.Request)
            hosts.extend(v.decode() for k, v in event.headers if k == b"host")
            writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, f"{address}%{interface}", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        status = await client.post(
            f"http://[{address}%25{interface}]:{port}/hook",
            b"{}",
            [],
            connect_timeout=2,
            total_timeout=5,
        )
    finally:
        server.close()
        await server.wait_closed()
    (host,) = hosts
    return status, host


@needs_link_local
@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_a_zone_id_is_delivered_to_on_both_loops(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    assert FOUND is not None
    address, interface = FOUND
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        status, host = runner.run(deliver_one(address, interface))
    assert status == 204
    assert host.startswith(f"[{address}]:")  # no zone: it names an interface of ours


def test_the_target_connects_to_the_decoded_zone() -> None:
    target = client.parse_url("http://[fe80::1%25lo]:8080/hook")
    assert target.host == "fe80::1%lo"
    assert target.host_header == "[fe80::1]:8080"
    assert target.port == 8080
    assert target.safe_url == "http://[fe80::1%25lo]:8080"  # the logs name the interface
    assert target.server_name == "fe80::1"


def test_a_zone_naming_no_interface_is_refused_at_start(tmp_path: Path) -> None:
    # A port in use: a URL the settings took would end the start at the bind check.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = subprocess.run(
            [sys.executable, "-m", "syncd"],
            env={
                **os.environ,
                "SERVICE_BIND": f"127.0.0.1:{taken.getsockname()[1]}",
                "SERVICE_DATA_DIR": str(tmp_path / "data"),
                "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
                "SERVICE_WEBHOOK_URL": "http://[fe80::1%25nosuchif0]:8080/hook",
            },
            capture_output=True,
            timeout=20,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [
        "syncd: SERVICE_WEBHOOK_URL: webhook URL 'http://[fe80::1%25nosuchif0]:8080/…'"
        " has zone id 'nosuchif0', which names no network interface of this host"
    ]


def test_a_link_local_address_without_a_zone_is_refused() -> None:
    """Every connect to it fails (EINVAL: which interface?), so every event
    would be retried and dropped: refused when the URL is read."""
    with pytest.raises(ValueError) as info:
        client.parse_url("http://[fe80::1]:8080/hook")
    assert str(info.value) == (
        "webhook URL 'http://[fe80::1]:8080/…' is a link-local address, which is on every"
        " interface: name one with a zone id, as in http://[fe80::1%25eth0]:8080/…"
    )


def test_a_zone_this_host_cannot_connect_with_is_refused() -> None:
    """A zone id on an address outside fe80::/10 by interface name: the
    system's resolver refuses it (as every connect would), so it is refused
    when the URL is read."""
    with pytest.raises(ValueError) as info:
        client.parse_url("http://[::1%25lo]:8080/hook")
    assert str(info.value).startswith(
        "webhook URL 'http://[::1%25lo]:8080/…' cannot be connected to with its zone id: "
    ), info.value
