"""Damage a crash cannot explain: the server refuses to start with one line
naming the file, the offset and what to do (exit status 2, as for a bad
setting), not a traceback that a process manager prints again at every
restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from syncd.store.embedded.log import HEADER
from tests.conftest import ADMIN, SIGNING_KEY_HEX

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

    proc = subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            **os.environ,
            "SERVICE_BIND": "127.0.0.1:1",
            "SERVICE_DATA_DIR": str(data_dir),
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_ADMIN_TOKEN": ADMIN,
        },
        capture_output=True,
        timeout=30,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err + proc.stdout.decode()
    assert f"syncd: {segment}: checksum mismatch at offset 0, before data that was made " in err
    assert "refusing to start" in err
