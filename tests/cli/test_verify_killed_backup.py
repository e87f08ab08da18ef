"""``syncd verify`` on what a killed ``syncd backup`` left agrees with a
server's start on it (``refuse_interrupted_backup``): an empty
``.syncd-backup-unpacking/`` beside the moved manifest (killed between its
last two steps) is a whole copy, reported OK with the leftover directory
named as harmless; a staging directory holding anything, or without the
manifest beside it, is damage, as the server refuses to start there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from syncd.store.embedded.backup import UNPACKING
from tests.cli.support import backup_killed_at, server_to_back_up, verify


@pytest.fixture
async def url(spawn_server: Any) -> str:
    """A server with a log and history to back up."""
    return await server_to_back_up(spawn_server)


@pytest.fixture
def killed_after_manifest(url: str, tmp_path: Path) -> Path:
    """A backup killed as it removes its (empty) staging directory: the
    manifest and every file are in place."""
    dest = tmp_path / "copy"
    backup_killed_at(dest, url, "os.rmdir", str(dest / UNPACKING))
    assert os.listdir(dest / UNPACKING) == [] and (dest / "MANIFEST.json").exists()
    return dest


def test_empty_staging_beside_the_manifest_is_whole(killed_after_manifest: Path) -> None:
    dest = killed_after_manifest
    checked = verify(dest)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == f"{dest}: OK"
    assert "  manifest: checked" in lines
    assert not [line for line in lines if "problem" in line]
    assert f"  note: {UNPACKING}/: empty, left by a syncd backup stopped just before its end" in (
        checked.stdout
    )
    assert "harmless" in checked.stdout
    assert (dest / UNPACKING).is_dir()  # verify writes nothing; the server's start removes it


def test_staging_holding_anything_beside_the_manifest_is_damage(
    killed_after_manifest: Path,
) -> None:
    dest = killed_after_manifest
    (dest / UNPACKING / "stray").write_bytes(b"x")
    checked = verify(dest)
    assert checked.returncode == 1, checked.stdout
    assert "an interrupted syncd backup, not a whole one" in checked.stdout
    assert "note:" not in checked.stdout


def test_empty_staging_without_the_manifest_is_damage(killed_after_manifest: Path) -> None:
    dest = killed_after_manifest
    (dest / "MANIFEST.json").unlink()
    checked = verify(dest)
    assert checked.returncode == 1, checked.stdout
    assert "an interrupted syncd backup, not a whole one" in checked.stdout


def test_a_link_named_staging_is_damage(killed_after_manifest: Path, tmp_path: Path) -> None:
    dest = killed_after_manifest
    (dest / UNPACKING).rmdir()
    (tmp_path / "elsewhere").mkdir()
    (dest / UNPACKING).symlink_to(tmp_path / "elsewhere")
    checked = verify(dest)
    assert checked.returncode == 1, checked.stdout
    assert "an interrupted syncd backup, not a whole one" in checked.stdout
