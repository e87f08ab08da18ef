"""``syncd backup DEST`` and ``syncd verify DIR`` on a path the system refuses
to look at (a name longer than NAME_MAX; the same path as a directory that may
not be searched): one line naming it and exit 2, not an OSError traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from syncd.cli import main


@pytest.fixture
def too_long(tmp_path: Path) -> Path:
    """A name stat refuses with ENAMETOOLONG."""
    return tmp_path / ("x" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1))


def test_backup_names_a_destination_it_cannot_look_at(
    too_long: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["backup", str(too_long), "--token", "t", "--url", "http://127.0.0.1:1"]
    assert main(args, env={}) == 2
    err = capsys.readouterr().err
    assert err == f"syncd backup: {too_long}: File name too long\n"


def test_verify_names_a_directory_it_cannot_look_at(
    too_long: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(too_long)], env={}) == 2
    assert capsys.readouterr().err == f"syncd verify: {too_long}: File name too long\n"
