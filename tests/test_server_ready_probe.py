"""/health/ready on the embedded store was passive: a data directory whose
disk filled up (or turned read-only, or failed with EIO) kept answering 200
``ready`` for as long as nobody wrote, and a load balancer sent the node
traffic that would all fail at its first op. An idle store now proves every
HEALTH_PROBE_INTERVAL_S that its disk takes a write (a page written and
fsynced in the log's directory, in the store's I/O thread; a store that
wrote a batch meanwhile has proven it already): a failed probe turns
readiness 503 and refuses writes, as a failed write does, until a probe
succeeds again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from syncd.store.embedded.store import HEALTH_PROBE_INTERVAL_S, PROBE_INTERVAL_S
from tests.conftest import Subprocess
from tests.http.support import issue, op
from tests.store.embedded.test_failures import small_tmpfs
from tests.store.embedded.test_full_disk import fill

SLACK_S = 5.0


async def wait_readiness(
    client: httpx.AsyncClient, status: int, within: float, log: Callable[[], str]
) -> dict[str, object]:
    deadline = time.monotonic() + within
    while True:
        answer = await client.get("/health/ready")
        if answer.status_code == status:
            body: dict[str, object] = answer.json()
            return body
        assert time.monotonic() < deadline, (answer.status_code, answer.text, log())
        await asyncio.sleep(0.1)


async def test_an_idle_node_whose_disk_fills_is_not_ready_until_it_has_room(
    tmp_path: Path, spawn_server: Callable[..., Subprocess]
) -> None:
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        server = spawn_server({"SERVICE_DATA_DIR": str(mnt / "data")})
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
            token = await issue(client, write=["*"], read=["*"])
            assert (await op(client, token, "gc:a", {"op": "increment"})).status_code == 200
            assert (await client.get("/health/ready")).status_code == 200
            filler = mnt / "filler"
            fill(filler)
            body = await wait_readiness(client, 503, HEALTH_PROBE_INTERVAL_S + SLACK_S, server.log)
            assert body["status"] == "unavailable"
            refused = await op(client, token, "gc:a", {"op": "increment"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "unavailable"
            filler.unlink()
            await wait_readiness(client, 200, PROBE_INTERVAL_S + SLACK_S, server.log)
            deadline = time.monotonic() + SLACK_S
            while (
                answer := await op(client, token, "gc:a", {"op": "increment"})
            ).status_code != 200:
                assert time.monotonic() < deadline, answer.text  # the state is read back first
                await asyncio.sleep(0.1)
            state = await client.get("/v1/namespaces/app/crdts/gc:a", headers=token)
            assert state.json()["value"] == 2, state.text  # the refused op is not in it
        assert server.terminate() == 0
    assert "takes no writes" in server.log()
