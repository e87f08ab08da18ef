"""The replication stream on a node whose descriptors are numbered past 1023.

``select.select`` refuses any descriptor at or above FD_SETSIZE (1024) with a
ValueError. A node with a thousand client connections open (the documented
systemd unit allows 65536 descriptors, and ``syncd serve`` raises its soft
limit to SERVICE_MAX_CONNECTIONS + 256) opens its replication connection on
such a number, so the stream must wait on it some other way. Here the node is
started with descriptors 3..HIGH_FD already taken (inherited copies of
/dev/null), so every socket it opens is numbered past them.
"""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest

from tests.cluster.pgdb import database_url
from tests.cluster.support import NS, SseWatcher, client, node_env
from tests.conftest import ADMIN, SIGNING_KEY_HEX, Subprocess, free_port, wait_ready

pytestmark = pytest.mark.timeout(90)

HIGH_FD: Final = 1100
"""Past FD_SETSIZE (1024) with some room: the descriptors the node inherits."""

DESCRIPTORS_NEEDED: Final = HIGH_FD + 256
"""The soft limit the test process needs to hold HIGH_FD descriptors and still work."""

STATE_WAIT_S: Final = 20.0
"""The stream reconnects with backoff up to 5 s (syncd/cluster/wal.py)."""


@pytest.fixture
def high_descriptors() -> Iterator[list[int]]:
    """Descriptors up to HIGH_FD, all /dev/null, closed afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < DESCRIPTORS_NEEDED:
        if hard != resource.RLIM_INFINITY and hard < DESCRIPTORS_NEEDED:
            pytest.skip(f"the hard descriptor limit ({hard}) is below {DESCRIPTORS_NEEDED}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS_NEEDED, hard))
    first = os.open(os.devnull, os.O_RDONLY)
    taken = [first]
    try:
        while taken[-1] < HIGH_FD:
            taken.append(os.dup(first))
        yield taken
    finally:
        for fd in taken:
            os.close(fd)
        if soft < DESCRIPTORS_NEEDED:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def spawn_crowded(
    tmp_path: Path, high_descriptors: list[int]
) -> Iterator[Callable[[dict[str, str]], Subprocess]]:
    """Like ``spawn_server``, but the node inherits ``high_descriptors``."""
    procs: list[Subprocess] = []

    def spawn(env: dict[str, str]) -> Subprocess:
        port = free_port()
        full_env = {
            **os.environ,
            "SERVICE_BIND": f"127.0.0.1:{port}",
            "SERVICE_DATA_DIR": str(tmp_path / "crowded-data"),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_ADMIN_TOKEN": ADMIN,
            "SERVICE_FSYNC": "never",
            **env,
        }
        log_path = tmp_path / "crowded.log"
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "syncd"],
                env=full_env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=high_descriptors,
            )
        sub = Subprocess(proc, port, log_path)
        procs.append(sub)
        wait_ready(port, proc)
        return sub

    yield spawn
    for sub in procs:
        if sub.proc.poll() is None:
            sub.kill()


def wal_env(url: str, prefix: str) -> dict[str, str]:
    return {
        "SERVICE_WAL_CONNSTR": url,
        "SERVICE_WAL_SLOT": prefix,
        "SERVICE_WAL_PUB": prefix + "_pub",
    }


async def wait_streaming(node: Subprocess) -> None:
    deadline = time.monotonic() + STATE_WAIT_S
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            body = (await http.get(f"{node.url}/health/ready")).json()
            if body.get("wal_stream") == "streaming":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"wal_stream is {body.get('wal_stream')!r}:\n{node.log()}")
            await asyncio.sleep(0.1)


async def test_a_large_delta_reaches_a_node_whose_stream_is_on_a_descriptor_past_1023(
    spawn_server: Callable[..., Subprocess],
    spawn_crowded: Callable[[dict[str, str]], Subprocess],
    cluster_db: str,
) -> None:
    url = database_url(cluster_db)
    prefix = "t" + secrets.token_hex(4)
    writer = spawn_server(node_env(url, "writer", **wal_env(url, prefix)), ready=False)
    crowded = spawn_crowded(node_env(url, "crowded", **wal_env(url, prefix)))
    wait_ready(writer.port, writer.proc)
    await wait_streaming(crowded)
    watcher = SseWatcher(crowded.port, "lw:big")
    await watcher.opened()

    value = secrets.token_hex(25_000)  # 50 KB: past what a notification carries
    async with client(writer.port) as http:
        answer = await http.post(
            f"/v1/namespaces/{NS}/crdts/lw:big/ops", json={"op": "set", "value": value}
        )
        assert answer.status_code == 200
    await watcher.wait(lambda: watcher.last_seq() == 1, timeout=10)
    assert watcher.deltas[-1]["op"]["value"] == value
    await watcher.close()
    assert "ValueError" not in crowded.log()
    assert crowded.terminate() == 0
    assert writer.terminate() == 0
