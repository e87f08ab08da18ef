"""A real server killed (SIGKILL) while history compaction copies the live
frames of sparse segments to the head of the history.

The copy runs in the snapshot thread, beside the log's thread appending each
batch's frames. When the two planned their places apart and wrote them apart,
a batch's frames could be planned after a copy whose write was not done and
written first; a process killed in the copy's write then left a torn copy
with good frames after it (or at the end of a segment before the last): not
a tail, so every start said the range was damaged and ``syncd verify`` said
DAMAGED (exit 1, "restore from a backup") for good, after a mere kill of the
process. Nothing acknowledged was lost, but nothing was damaged either.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN, SIGNING_KEY_HEX, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[3]
AUTH = {"authorization": f"Bearer {ADMIN}"}

# The server, with small segments and the copy's write held half done (as a
# kill can cut a long write) once MARKER's directory exists.
_SERVE_WITH_A_SLOW_COPY = textwrap.dedent(
    """
    import json, os, sys, threading, time
    from syncd.store.embedded.history_files import HistoryFiles
    from syncd.store.embedded.store import FileStore

    FileStore.__init__.__kwdefaults__.update(json.loads(os.environ["STORE_OPTIONS"]))
    marker = os.environ["COPY_MARKER"]
    write = HistoryFiles.write

    def slow_copy(self, pos, data):
        copying = threading.current_thread().name == "syncd-snapshot"
        if not copying or len(data) < 2 or not os.path.isdir(os.path.dirname(marker)):
            return write(self, pos, data)
        write(self, pos, data[: len(data) // 2])
        open(marker, "w").close()
        time.sleep(60)  # killed meanwhile

    HistoryFiles.write = slow_copy
    from syncd.cli import main
    sys.exit(main(["serve"]))
    """
)

OPTIONS = {"history_segment_bytes": 4096, "snapshot_every_bytes": 8192, "segment_bytes": 8192}

COPY_WAIT_S = 60.0
"""How long the writers may take to make a compaction copy something."""


def verify(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(data)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def writer(url: str, name: str, acked: dict[str, set[str]], stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=2, headers=AUTH) as client:
        i = 0
        while not stop.is_set():
            i += 1
            crdt = f"or:{name}-{i % 7}"
            element = f"{name}-{i}-" + "x" * 100
            try:
                r = await client.post(
                    f"/v1/namespaces/n/crdts/{crdt}/ops", json={"op": "add", "element": element}
                )
            except httpx.HTTPError:
                return  # killed, or held behind the copy
            assert r.status_code == 200, r.text
            acked.setdefault(crdt, set()).add(element)


async def test_a_kill_in_a_compaction_copy_leaves_a_tail_that_a_start_cuts(
    spawn_server: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    marker = tmp_path / "armed" / "copying"
    port = free_port()
    env = {
        **os.environ,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(data),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_FSYNC": "batch",
        "SERVICE_HISTORY_RETENTION": "3ops",
        "STORE_OPTIONS": json.dumps(OPTIONS),
        "COPY_MARKER": str(marker),
    }
    with open(tmp_path / "killed.log", "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE_WITH_A_SLOW_COPY],
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    acked: dict[str, set[str]] = {}
    try:
        wait_ready(port, proc)
        url = f"http://127.0.0.1:{port}"
        stop = asyncio.Event()
        # A first round fills segments that retention then leaves sparse.
        tasks = [asyncio.create_task(writer(url, f"w{n}", acked, stop)) for n in range(3)]
        await asyncio.sleep(1.5)
        marker.parent.mkdir()
        # The writers go on until a compaction copies: on a loaded machine
        # (a clean clone's make test) 10 s of them did not always fill enough.
        deadline = asyncio.get_running_loop().time() + COPY_WAIT_S
        while not marker.exists() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert marker.exists(), "no compaction copied anything: the test tested nothing"
        await asyncio.sleep(0.5)  # batches written meanwhile, if they can be
        proc.kill()  # SIGKILL in the copy's write
        proc.wait(10)
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert sum(map(len, acked.values())) > 50

    server = spawn_server({"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(data)})
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        for crdt, elements in acked.items():
            r = await client.get(f"/v1/namespaces/n/crdts/{crdt}")
            assert r.status_code == 200, r.text
            assert elements <= set(r.json()["value"]), crdt
        r = await client.post("/v1/namespaces/n/crdts/gc:after/ops", json={"op": "increment"})
        assert r.status_code == 200, r.text
    assert server.terminate() == 0
    assert "damaged" not in server.log(), server.log()
    result = verify(data)
    assert result.returncode == 0, result.stdout + result.stderr
