"""Damage a crash cannot explain: the server refuses to start with one line
naming the file, the offset and what to do (exit status 2, as for a bad
setting), not a traceback that a process manager prints again at every
restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from syncd.store.embedded.log import HEADER
from tests.conftest import ADMIN, start_to_the_end

AUTH = {"authorization": f"Bearer {ADMIN}"}


async def test_damage_before_later_batches_refuses_in_one_line(
    spawn_server: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = spawn_server({"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(data_dir)})
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        for _ in range(3):  # one write batch each
            r = await client.post("/v1/namespaces/n/crdts/gc:x/ops", json={"op": "increment"})
            assert r.status_code == 200
    assert server.terminate() == 0
    (segment,) = [p for p in (data_dir / "log").glob("*.seg") if p.stat().st_size]
    data = bytearray(segment.read_bytes())
    data[HEADER.size + 5] ^= 0x40  # inside the first record, two batches after it
    segment.write_bytes(bytes(data))

    proc = start_to_the_end(data_dir, timeout=30, SERVICE_ADMIN_TOKEN=ADMIN)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err + proc.stdout.decode()
    assert f"syncd: {segment}: checksum mismatch at offset 0, before data that was made " in err
    assert "refusing to start" in err


async def test_a_fifo_in_place_of_a_data_file_refuses_the_start(
    spawn_server: Any, tmp_path: Path
) -> None:
    """Start-up reads every segment, snapshot and history file: opening a FIFO
    there waited for a writer for ever (and a device, read to its end, would
    never end either). It names the file in one line instead (exit 2)."""
    data_dir = tmp_path / "data"
    server = spawn_server({"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(data_dir)})
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        r = await client.post("/v1/namespaces/n/crdts/gc:x/ops", json={"op": "increment"})
        assert r.status_code == 200
    assert server.terminate() == 0
    (segment,) = [p for p in (data_dir / "log").glob("*.seg") if p.stat().st_size]
    (history,) = (data_dir / "history").glob("*.hist")
    for fifo, replaces in (
        (segment, True),
        (history, True),
        (data_dir / "history" / "index.hint", True),
        (data_dir / "snapshots" / "snapshot-1.snap", False),
        (data_dir / "log" / "00000000000000000099.seg", False),
    ):
        saved = fifo.read_bytes() if replaces else None
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        proc = start_to_the_end(data_dir, SERVICE_ADMIN_TOKEN=ADMIN)
        err = proc.stderr.decode()
        assert proc.returncode == 2, (fifo, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"syncd: {fifo}: not a regular file" in err, err
        fifo.unlink()
        if saved is not None:
            fifo.write_bytes(saved)
    server = spawn_server({"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(data_dir)})
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        r = await client.get("/v1/namespaces/n/crdts/gc:x")
        assert r.status_code == 200 and r.json()["value"] == 1
    assert server.terminate() == 0
