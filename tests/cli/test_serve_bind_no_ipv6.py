"""SERVICE_BIND on IPv6 on a host without IPv6. With IPv6 switched off
(``net.ipv6.conf.all.disable_ipv6=1``, as many containers and hardened hosts
have it), ``[::]:3000`` still bound: the start said "listening on
[::]:3000" and the service was ready, yet nothing could reach it (the socket
was IPv6 only, and no interface has an IPv6 address). It is now one
dual-stack socket, which IPv4 clients reach there; only where the host
cannot make one is it refused. On a kernel without IPv6 at all
(``ipv6.disable=1``) the bind failed with EAFNOSUPPORT, which was no bind
refusal: exit 1 and a bare OS error after the store was opened. It is now one
line naming SERVICE_BIND, exit 2, before anything is opened, saying what to
write instead."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncd.bind import bind_refusal
from tests.conftest import SIGNING_KEY_HEX


def test_a_kernel_without_ipv6_is_a_bind_refusal() -> None:
    refusal = bind_refusal(OSError(errno.EAFNOSUPPORT, "x"), "::", 3000)
    assert refusal == (
        "cannot listen on [::]:3000: Address family not supported by protocol"
        " (this host has no IPv6: 0.0.0.0:3000 listens on every IPv4 address)"
    )


def _can_make_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.fixture
def without_ipv6() -> Iterator[str]:
    """A network namespace whose interfaces (its loopback) have IPv6 off."""
    name = f"syncd-no6-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {made.stderr.decode().strip()}")
    try:
        for command in (
            ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
            ["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            ["ip", "link", "set", "lo", "up"],
        ):
            subprocess.run(["ip", "netns", "exec", name, *command], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


IN_NAMESPACE = ("ip", "netns", "exec")
SYNCD = (sys.executable, "-m", "syncd")


@pytest.mark.skipif(
    not (_can_make_namespaces() and socket.has_dualstack_ipv6()),
    reason="needs root, ip netns and dual-stack sockets",
)
def test_the_ipv6_wildcard_without_ipv6_serves_ipv4(tmp_path: Path, without_ipv6: str) -> None:
    """``[::]`` is one dual-stack socket (syncd.server.dual_stack_socket):
    with IPv6 switched off it still takes IPv4 clients, so it is served, not
    refused as an address nobody could reach; ``syncd health`` asks it on
    127.0.0.1, as ::1 is no address there."""
    port = "38979"
    syncd = " ".join(SYNCD)
    script = (
        f"( {syncd} & echo $! > {tmp_path}/pid; wait ) & "
        f'{sys.executable} -c "$CHECK" {port} && {syncd} health; status=$?; '
        f"kill -TERM $(cat {tmp_path}/pid); wait; exit $status"
    )
    proc = subprocess.run(
        [*IN_NAMESPACE, without_ipv6, "sh", "-c", script],
        env={
            **os.environ,
            "CHECK": LIVE_OVER_IPV4,
            "SERVICE_BIND": f"[::]:{port}",
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        },
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"listening on [::]:{port}".encode() in proc.stderr


@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and ip netns")
def test_ipv4_without_ipv6_still_starts(tmp_path: Path, without_ipv6: str) -> None:
    """Served once /health/live answers on 127.0.0.1, then stopped (SIGTERM):
    the start and the stop both clean. (It ran for a fixed 10 s before the
    SIGTERM; the namespace is the test's own, so any port is free in it.)"""
    port = "38978"
    script = (
        f"( {' '.join(SYNCD)} & echo $! > {tmp_path}/pid; wait $! ) & served=$!; "
        f'{sys.executable} -c "$CHECK" {port}; check=$?; '
        f"kill -TERM $(cat {tmp_path}/pid); wait $served; status=$?; "
        f'[ "$check" -eq 0 ] || exit 100; exit $status'
    )
    proc = subprocess.run(
        [*IN_NAMESPACE, without_ipv6, "sh", "-c", script],
        env={
            **os.environ,
            "CHECK": LIVE_OVER_IPV4,
            "SERVICE_BIND": f"0.0.0.0:{port}",
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        },
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"listening on 0.0.0.0:{port}".encode() in proc.stderr


LIVE_OVER_IPV4 = (
    "import socket, sys, time, urllib.request\n"
    "for _ in range(400):\n"
    "    try:\n"
    "        answer = urllib.request.urlopen('http://127.0.0.1:%s/health/live' % sys.argv[1])\n"
    "        sys.exit(0 if answer.status == 200 else 1)\n"
    "    except OSError:\n"
    "        time.sleep(0.05)\n"
    "sys.exit(1)\n"
)
"""A script that asks /health/live on 127.0.0.1 at the port it is given, for
up to 20 s (the server is starting): exit 0 on a 200."""

HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
"""Debian's /etc/hosts: localhost is ::1 as well as 127.0.0.1."""


@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and ip netns")
def test_a_name_is_served_on_the_addresses_this_host_has(tmp_path: Path, without_ipv6: str) -> None:
    """SERVICE_BIND=localhost:3000 with IPv6 switched off and ::1 in
    /etc/hosts (Debian's, most container images') was refused: "cannot
    listen on [::1]:3000: Cannot assign requested address", exit 2. An
    address of a name that this host does not have is left out (nginx and Go
    refuse or skip the same way); the name is refused only when it has none
    here."""
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    port = "38977"
    script = (
        f"mount --bind {hosts} /etc/hosts && "
        f"( {' '.join(SYNCD)} & echo $! > {tmp_path}/pid; wait ) & "
        f'{sys.executable} -c "$CHECK" {port}; status=$?; '
        f"kill -TERM $(cat {tmp_path}/pid); wait; exit $status"
    )
    proc = subprocess.run(
        [*IN_NAMESPACE, without_ipv6, "unshare", "-m", "sh", "-c", script],
        env={
            **os.environ,
            "CHECK": LIVE_OVER_IPV4,
            "SERVICE_BIND": f"localhost:{port}",
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        },
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"listening on localhost:{port}".encode() in proc.stderr
