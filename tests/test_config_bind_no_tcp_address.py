"""SERVICE_BIND on an address that takes no TCP connection: a multicast
address (IPv4 224.0.0.0/4, IPv6 ff00::/8), the IPv4 broadcast address, or
an IPv4 address written as IPv4-mapped IPv6 ([::ffff:127.0.0.1], which an
IPv6-only listening socket cannot take). The IPv6 forms failed the server's
bind after the store was opened (exit 1, "cannot start: [Errno 22] error
while attempting to bind on address ...: invalid argument"), and the IPv4
ones bound: the start said "listening on 224.0.0.1:3000" and the node was
ready, yet no client could ever connect. Each is now refused with what to
write instead, one line, exit 2, before anything is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env
from tests.conftest import start_to_the_end

REFUSED = {
    "224.0.0.1:3000": "224.0.0.1 is a multicast address: TCP listens on a unicast address"
    " (0.0.0.0 listens on every IPv4 address)",
    "239.255.255.250:0": "239.255.255.250 is a multicast address: TCP listens on a unicast"
    " address (0.0.0.0 listens on every IPv4 address)",
    "255.255.255.255:3000": "255.255.255.255 is the broadcast address: TCP listens on a unicast"
    " address (0.0.0.0 listens on every IPv4 address)",
    "[ff02::1]:3000": "ff02::1 is a multicast address: TCP listens on a unicast address"
    " ([::] listens on every IPv6 address)",
    "[::ffff:127.0.0.1]:3000": "::ffff:127.0.0.1 is an IPv4 address in IPv6 form: write it"
    " as 127.0.0.1:3000",
}


@pytest.mark.parametrize(("bind", "problem"), REFUSED.items())
def test_an_address_no_tcp_client_can_reach_is_refused(bind: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_BIND": bind})
    assert str(info.value) == f"SERVICE_BIND: {bind!r}: {problem}"


@pytest.mark.parametrize(
    "bind",
    ["127.0.0.1:3000", "0.0.0.0:0", "[::]:3000", "[::1]:0", "10.1.2.3:80", "[2001:db8::1]:80"],
)
def test_unicast_and_wildcard_addresses_are_taken(bind: str) -> None:
    assert from_env({"SERVICE_BIND": bind}).bind == bind


@pytest.mark.parametrize("bind", ["224.0.0.1:3000", "[::ffff:127.0.0.1]:3000"])
def test_the_real_process_refuses_it_in_one_line(tmp_path: Path, bind: str) -> None:
    proc = start_to_the_end(tmp_path / "data", SERVICE_BIND=bind)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.decode().strip().splitlines()
    assert lines == [f"syncd: SERVICE_BIND: {bind!r}: {REFUSED[bind]}"]
    assert not (tmp_path / "data").exists()
