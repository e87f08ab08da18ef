"""A server pointed at what a killed ``syncd backup`` left (its staging
directory ``.syncd-backup-unpacking/`` in ``DEST``): it refuses to start, in
one line naming the problem and what to do, and writes nothing there (not
even ``LOCK`` or ``admin_token``), whether the run was killed while
unpacking (``DEST`` holds only the staging directory) or while moving the
files into place (the log and history in ``DEST``, the manifest still in the
staging directory). Killed after the manifest's move, only removing the
empty staging directory was left: the backup is whole, and the server
starts on it and removes the directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.store.embedded.backup import UNPACKING
from tests.cli.support import backup_killed_at, server_to_back_up
from tests.conftest import start_to_the_end
from tests.http.support import issue


@pytest.fixture
async def url(spawn_server: Any) -> str:
    """A server with a log and history to back up."""
    return await server_to_back_up(spawn_server)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(dest: Path) -> None:
    before = _tree(dest)
    done = start_to_the_end(dest, timeout=10)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err == (
        f"syncd: {dest} holds {UNPACKING}/: a syncd backup into it was interrupted before "
        "the copy was whole, so it is not a data directory (syncd verify names it too); "
        "take the backup again into a new or empty directory, or set SERVICE_DATA_DIR "
        "to a whole copy\n"
    )
    assert _tree(dest) == before  # nothing written: no LOCK, no admin_token, no log/


def test_killed_while_unpacking_refuses_the_start(url: str, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    backup_killed_at(dest, url, "open", str(dest / UNPACKING / "history") + "/")
    assert os.listdir(dest) == [UNPACKING]
    _refused(dest)


def test_killed_before_the_manifest_moved_refuses_the_start(url: str, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    backup_killed_at(dest, url, "os.rename", str(dest / UNPACKING / "MANIFEST.json"))
    # The log, snapshots and history are in place: only the manifest is not.
    assert {"log", "history", UNPACKING} <= set(os.listdir(dest))
    assert os.listdir(dest / UNPACKING) == ["MANIFEST.json"]
    _refused(dest)


async def test_killed_after_the_manifest_moved_starts_and_tidies(
    url: str, spawn_server: Any, tmp_path: Path
) -> None:
    dest = tmp_path / "copy"
    backup_killed_at(dest, url, "os.rmdir", str(dest / UNPACKING))
    assert os.listdir(dest / UNPACKING) == [] and (dest / "MANIFEST.json").exists()
    restored = spawn_server({"SERVICE_DATA_DIR": str(dest)})
    assert not (dest / UNPACKING).exists()
    async with httpx.AsyncClient(base_url=restored.url) as client:
        h = await issue(client)
        r = await client.get("/v1/namespaces/app/crdts/lw:title", headers=h)
        assert r.status_code == 200 and "kept" in r.text, r.text
    assert restored.terminate() == 0
    assert f"removed the empty {UNPACKING}/" in restored.log()
