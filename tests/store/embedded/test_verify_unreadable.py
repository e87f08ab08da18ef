"""``syncd verify`` on files this user may not read (verify run as another
user than the service's): not damage (exit 1) but what verify could not do,
exit 2 and ``NOT CHECKED``, each file named once, and an unreadable manifest
is not "checked"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunningServer
from tests.store.embedded.test_verify_damaged_manifest import _backup

DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
"""Root reads any file (CAP_DAC_OVERRIDE): without these capabilities a mode
000 file is refused to it as to anyone."""

pytestmark = pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="as root, needs setpriv to give up reading every file",
)


def _verify_unprivileged(path: Path) -> subprocess.CompletedProcess[str]:
    prefix = DROP_DAC if os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "syncd", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("kind", ["log", "history"])
async def test_an_unreadable_file_is_named_once_and_is_no_damage(
    server: RunningServer, tmp_path: Path, kind: str
) -> None:
    copy = await _backup(server, tmp_path / "copy")
    (unreadable,) = (copy / kind).iterdir()
    unreadable.chmod(0)
    done = _verify_unprivileged(copy)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stdout
    lines = done.stdout.splitlines()
    assert lines[0] == f"{copy}: NOT CHECKED", lines
    named = [line for line in lines if unreadable.name in line]
    assert named == [f"  unreadable: {kind}/{unreadable.name}: Permission denied"], lines
    assert not [line for line in lines if "problem:" in line], lines


async def test_an_unreadable_manifest_is_not_checked(server: RunningServer, tmp_path: Path) -> None:
    copy = await _backup(server, tmp_path / "copy")
    (copy / "MANIFEST.json").chmod(0)
    done = _verify_unprivileged(copy)
    assert done.returncode == 2, done.stdout
    lines = done.stdout.splitlines()
    assert "  manifest: unreadable" in lines, lines
    assert "  unreadable: MANIFEST.json: Permission denied" in lines, lines


async def test_damage_beside_an_unreadable_file_is_damage(
    server: RunningServer, tmp_path: Path
) -> None:
    copy = await _backup(server, tmp_path / "copy")
    (history,) = (copy / "history").iterdir()
    history.chmod(0)
    (copy / "log" / "stray").write_bytes(b"x")
    done = _verify_unprivileged(copy)
    assert done.returncode == 1, done.stdout
    assert done.stdout.startswith(f"{copy}: DAMAGED"), done.stdout
