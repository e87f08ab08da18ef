"""``syncd backup`` against a running server, and ``syncd verify`` on the copy
(the backup itself and the checks: tests/store/test_backup.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ADMIN
from tests.http.support import issue, op


async def test_backs_up_a_running_server_and_verifies(spawn_server: Any, tmp_path: Path) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "kept"})
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    dest = tmp_path / "copy"
    cli = [sys.executable, "-m", "syncd"]
    done = subprocess.run(
        [*cli, "backup", str(dest), "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout and "1 records after the snapshot" in done.stdout
    again = subprocess.run(
        [*cli, "backup", str(dest), "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and "new or empty" in again.stderr
    wrong = subprocess.run(
        [*cli, "backup", str(tmp_path / "x"), "--url", server.url, "--token", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 1 and "401" in wrong.stderr
    checked = subprocess.run(
        [*cli, "verify", str(dest)], env=env, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0 and "OK" in checked.stdout
    (next((dest / "log").iterdir())).write_bytes(b"\x01" * 64)
    broken = subprocess.run(
        [*cli, "verify", str(dest)], env=env, capture_output=True, text=True, timeout=60
    )
    assert broken.returncode == 1 and "DAMAGED" in broken.stdout


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", *args], env=env, capture_output=True, text=True, timeout=60
    )


async def test_a_wrong_secret_is_named_and_leaves_nothing_behind(
    spawn_server: Any, tmp_path: Path
) -> None:
    server = spawn_server({})
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    dest = tmp_path / "new"
    wrong = run_cli("backup", str(dest), "--url", server.url, "--token", "not-the-secret", env=env)
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "401 invalid_token: the bearer is neither the admin secret nor a token" in wrong.stderr
    assert "root admin secret" in wrong.stderr
    assert not dest.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    wrong = run_cli("backup", str(empty), "--url", server.url, "--token", "x", env=env)
    assert wrong.returncode == 1 and list(empty.iterdir()) == []
    unreachable = run_cli("backup", str(dest), "--url", "http://127.0.0.1:1", env=env)
    assert unreachable.returncode == 1 and not dest.exists()


async def test_the_generated_admin_secret_can_be_left_out(
    spawn_server: Any, tmp_path: Path
) -> None:
    # No SERVICE_ADMIN_TOKEN: the server makes one and keeps it in the data dir.
    server = spawn_server({"SERVICE_ADMIN_TOKEN": ""})
    secret = (tmp_path / "data" / "admin_token").read_text().strip()
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": secret}
    with_it, without = tmp_path / "with", tmp_path / "without"
    done = run_cli("backup", str(with_it), "--url", server.url, env=env)
    assert done.returncode == 0, done.stderr
    assert (with_it / "admin_token").read_text().strip() == secret
    done = run_cli("backup", str(without), "--url", server.url, "--without-admin-token", env=env)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr
    assert not (without / "admin_token").exists()
    assert "admin_token" not in (without / "MANIFEST.json").read_text()
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(
            "/v1/admin/backup?admin_token=maybe", headers={"authorization": f"Bearer {secret}"}
        )
        assert r.status_code == 400 and r.json()["message"] == "admin_token: true or false"


def test_verify_says_plainly_when_a_directory_is_not_a_data_directory(tmp_path: Path) -> None:
    env = dict(os.environ)
    (tmp_path / "notes.txt").write_text("hello")
    for target, expected in (
        (tmp_path, "is not a syncd data directory or backup"),
        (tmp_path / "missing", "no such directory"),
        (tmp_path / "notes.txt", "not a directory"),
    ):
        result = run_cli("verify", str(target), env=env)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith("syncd verify: ") and expected in result.stderr
        assert result.stderr.count("\n") == 1


async def test_verify_points_a_saved_tar_at_unpacking(spawn_server: Any, tmp_path: Path) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/v1/admin/backup", headers={"authorization": f"Bearer {ADMIN}"})
    saved = tmp_path / "backup.tar"
    saved.write_bytes(r.content)
    result = run_cli("verify", str(saved), env=dict(os.environ))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "a tar, not a directory: unpack it (tar -xf) and verify the directory" in result.stderr


async def test_a_backup_taken_while_writes_run_restores_every_acknowledged_op(
    spawn_server: Any, tmp_path: Path
) -> None:
    server = spawn_server({"SERVICE_RATE_LIMIT": "1000000"})
    acked: list[tuple[float, str]] = []
    stop = asyncio.Event()

    async def write(client: httpx.AsyncClient, h: dict[str, str], name: str) -> None:
        i = 0
        while not stop.is_set():
            r = await op(client, h, "or:acked", {"op": "add", "element": f"{name}-{i}"})
            if r.status_code == 200:
                acked.append((time.monotonic(), f"{name}-{i}"))
            i += 1

    dest = tmp_path / "copy"
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        h = await issue(client)
        writers = [asyncio.create_task(write(client, h, f"w{n}")) for n in range(3)]
        while len(acked) < 50:
            await asyncio.sleep(0.02)
        started = time.monotonic()
        backup = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "syncd", "backup", str(dest), "--url", server.url,
            env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(backup.communicate(), 60)
        stop.set()
        await asyncio.gather(*writers)
    assert backup.returncode == 0 and b": OK" in out, err
    before = {element for at, element in acked if at < started}
    assert len(acked) > len(before) >= 50  # writes went on during the backup
    restored = spawn_server({"SERVICE_DATA_DIR": str(dest)})
    async with httpx.AsyncClient(base_url=restored.url) as client:
        h = await issue(client)
        r = await client.get("/v1/namespaces/app/crdts/or:acked", headers=h)
        assert before <= set(r.json()["value"])


async def test_verify_answers_when_a_fifo_stands_in_for_a_file(
    spawn_server: Any, tmp_path: Path
) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "kept"})
    dest = tmp_path / "copy"
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    assert run_cli("backup", str(dest), "--url", server.url, env=env).returncode == 0
    (segment,) = (dest / "log").iterdir()
    for fifo, name in ((segment, f"log/{segment.name}"), (dest / "MANIFEST.json", "MANIFEST.json")):
        saved = fifo.read_bytes()
        fifo.unlink()
        os.mkfifo(fifo)
        # Opening a FIFO blocks until a writer comes: verify used to hang here.
        result = run_cli("verify", str(dest), env=env)
        assert result.returncode == 1 and f"problem: {name}: not a regular file" in result.stdout
        fifo.unlink()
        fifo.write_bytes(saved)
    (dest / "MANIFEST.json").unlink()  # a data directory, without a manifest, likewise
    segment.unlink()
    os.mkfifo(segment)
    result = run_cli("verify", str(dest), env=env)
    assert result.returncode == 1 and "not a regular file" in result.stdout


async def test_a_restored_backup_stays_verifiable_once_the_server_writes(
    spawn_server: Any, tmp_path: Path
) -> None:
    """The server started on a copy sets its manifest aside (it no longer
    describes a directory the server writes to): ``syncd verify`` then checks
    the copy as the data directory it has become, instead of reporting every
    new log byte as damage."""
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "lw:title", {"op": "set", "value": "kept"})
    env = {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN}
    dest = tmp_path / "copy"
    assert run_cli("backup", str(dest), "--url", server.url, env=env).returncode == 0
    assert server.terminate() == 0
    manifest = (dest / "MANIFEST.json").read_bytes()

    restored = spawn_server({"SERVICE_DATA_DIR": str(dest)})
    async with httpx.AsyncClient(base_url=restored.url) as client:
        h = await issue(client)
        r = await op(client, h, "lw:title", {"op": "set", "value": "after the restore"})
        assert r.status_code == 200
    assert restored.terminate() == 0
    checked = run_cli("verify", str(dest), env=env)
    assert checked.returncode == 0, checked.stdout
    assert "manifest: none" in checked.stdout and "2 records after the snapshot" in checked.stdout
    assert not (dest / "MANIFEST.json").exists()
    assert (dest / "MANIFEST.restored.json").read_bytes() == manifest  # kept, for reference
    assert restored.log().count("restored from a backup") == 1

    again = spawn_server({"SERVICE_DATA_DIR": str(dest)})  # the note is made once
    assert again.terminate() == 0
    assert "restored from a backup" not in again.log()
    assert run_cli("verify", str(dest), env=env).returncode == 0
