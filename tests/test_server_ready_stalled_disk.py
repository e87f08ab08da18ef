"""A data directory whose disk stops answering (a hung fsync: a failing
drive's long retries, a hard NFS mount whose server went away) failed no
write: the batch in flight waited, every op after it waited behind it, and
/health/ready said 200 ``ready`` for as long as it lasted, so a load
balancer kept sending the node work that would hang. Now a store whose
probe write has not come back within HEALTH_PROBE_INTERVAL_S makes
/health/ready 503 until its disk answers again; writes are not refused for
it (a disk that is only slow answers them late, but answers)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx

from syncd.app import App
from syncd.server import Server
from tests.conftest import base_settings
from tests.http.support import issue, op
from tests.store.support import Faults, faulty_opener

INTERVAL_S = 0.1


async def wait_status(client: httpx.AsyncClient, status: int, within: float) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        answer = await client.get("/health/ready")
        if answer.status_code == status:
            return str(answer.json()["status"])
        assert loop.time() < deadline, answer.text
        await asyncio.sleep(0.02)


async def test_ready_is_503_while_the_disk_does_not_answer(tmp_path: Path) -> None:
    faults = Faults()
    config = base_settings(tmp_path / "data", fsync="batch")
    app = App(
        config,
        store_options={
            "opener": faulty_opener(faults),
            "probe_interval": 0.02,
            "health_probe_interval": INTERVAL_S,
        },
    )
    server = Server(config, app)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            token = await issue(client, write=["*"], read=["*"])
            assert (await op(client, token, "gc:a", {"op": "increment"})).status_code == 200
            await wait_status(client, 200, 1)
            faults.gate = threading.Event()  # the disk stops answering
            faults.entered.clear()
            pending = asyncio.ensure_future(op(client, token, "gc:a", {"op": "increment"}))
            assert await asyncio.to_thread(faults.entered.wait, 5)
            assert await wait_status(client, 503, INTERVAL_S * 20) == "unavailable"
            assert not pending.done()
            faults.gate.set()  # it answers again
            assert (await pending).status_code == 200
            faults.gate = None
            assert await wait_status(client, 200, INTERVAL_S * 20) == "ready"
            assert (await op(client, token, "gc:a", {"op": "increment"})).status_code == 200
    finally:
        if faults.gate is not None:
            faults.gate.set()
        await server.shutdown()
