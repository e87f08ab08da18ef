"""A SERVICE_BIND host that cannot be listened on by name (one that does not
resolve, or a typo with a space in it) was found only when the server bound,
after the store was opened: exit 1 and "cannot start: [Errno -2] Name or
service not known", naming neither the variable nor the host. Now it is one
line naming SERVICE_BIND and exit 2, before anything is opened."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env
from tests.conftest import start_to_the_end


def one_line(data_dir: Path, bind: str) -> str:
    proc = start_to_the_end(data_dir, SERVICE_BIND=bind)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert not data_dir.exists()  # refused before the store was opened
    return lines[0]


def test_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    line = one_line(tmp_path / "data", "nosuchhost.invalid:3000")
    assert line.startswith("syncd: SERVICE_BIND: cannot resolve 'nosuchhost.invalid': "), line


@pytest.mark.parametrize("bind", [" 127.0.0.1:3000", "host name:80", "127.0.0.1\t:80"])
def test_a_host_with_whitespace_is_refused(tmp_path: Path, bind: str) -> None:
    line = one_line(tmp_path / "data", bind)
    assert line.startswith("syncd: SERVICE_BIND: "), line
    assert "is not a host name or address" in line, line


@pytest.mark.parametrize(
    "bind", ["localhost:0", "127.0.0.1:3000", "[::1]:80", "my-host.example_1:80"]
)
def test_host_names_and_addresses_are_taken(bind: str) -> None:
    assert from_env({"SERVICE_BIND": bind}).bind == bind


def test_a_bad_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="SERVICE_BIND"):
        from_env({"SERVICE_BIND": "a/b:80"})


def test_an_address_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(tmp_path / "data", f"127.0.0.1:{port}")
    assert line == f"syncd: SERVICE_BIND: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_an_address_not_on_this_machine_is_one_line(tmp_path: Path) -> None:
    line = one_line(tmp_path / "data", "192.0.2.1:3000")  # TEST-NET-1: no host has it
    assert (
        line
        == "syncd: SERVICE_BIND: cannot listen on 192.0.2.1:3000: Cannot assign requested address"
    )
