"""SIGTERM and SIGINT at the edges of a real ``syncd`` process's life: one more
after the shutdown is done (while the loop and the interpreter are torn
down) ends it at once with the documented exit 0, never by the signal's
default action or a KeyboardInterrupt traceback; one during the embedded
store's start-up recovery ends the process at once instead of after the
whole recovery (and the bind), and the next start recovers every record."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from syncd.store.embedded.hint import HINT_NAME
from syncd.store.embedded.store import FileStore
from tests.store.support import op

RECORDS = 60_000
CRDTS = 6_000


def wait_for_line(server: Any, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.log():
        assert server.proc.poll() is None, server.log()
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.0005)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_after_the_shutdown_exits_zero(
    spawn_server: Any, sig: signal.Signals
) -> None:
    server = spawn_server()
    server.proc.send_signal(signal.SIGTERM)
    wait_for_line(server, "syncd stopped")
    # From the shutdown's last line until the process is gone, as often as
    # the process lasts: the loop's teardown, then the interpreter's.
    sent = 0
    while server.proc.poll() is None:
        try:
            os.kill(server.proc.pid, sig)
        except ProcessLookupError:
            break
        sent += 1
        time.sleep(0.0002)
    assert server.proc.wait(5) == 0, (sent, server.log())
    assert "Traceback" not in server.log() and "KeyboardInterrupt" not in server.log()


async def write_records(data_dir: Path) -> None:
    store = FileStore(data_dir, fsync="never")
    await store.open()
    seqs: dict[str, int] = {}
    batch = []
    for i in range(RECORDS):
        crdt = f"gc:{i % CRDTS}"
        seq = seqs[crdt] = seqs.get(crdt, 0) + 1
        body = {"op": "increment", "client_id": 7, "amount": 1, "count": seq}
        batch.append(op(seq, crdt=crdt, op=body))
        if len(batch) == 5_000:
            await store.append(batch)
            batch = []
    for crdt in seqs:
        store.note_size("n", crdt, 16)
    await store.close()


def test_a_stop_during_start_up_recovery_exits_at_once(spawn_server: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    asyncio.run(write_records(data_dir))
    # As after a crash: no index hint, so the start reads every history frame.
    (data_dir / "history" / HINT_NAME).unlink()
    server = spawn_server(ready=False)
    # The store writes its pid into LOCK as it takes it, the recovery's first step.
    lock = data_dir / "LOCK"
    deadline = time.monotonic() + 20
    while not (lock.exists() and lock.read_text().strip() == str(server.proc.pid)):
        assert server.proc.poll() is None and time.monotonic() < deadline, server.log()
        time.sleep(0.001)
    time.sleep(0.05)  # into the read (about a second of it here)
    sent = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0, server.log()
    took = time.monotonic() - sent
    log = server.log()
    assert "stop signal during the store's recovery" in log, log
    assert "opened" not in log and "listening" not in log, log
    assert "Traceback" not in log
    assert took < 1, took
    # Nothing is damaged: the directory verifies, and a start recovers it all.
    verify = subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{RECORDS} records" in verify.stdout, verify.stdout
    again = spawn_server()
    assert f"last durable sequence {RECORDS}" in again.log(), again.log()
    assert again.terminate() == 0
