"""The admin token and revocations files are read at the start: a FIFO (or
another special file) in their place stops the start in one line naming it,
where opening it waited for a writer for ever (and the process took no
SIGTERM meanwhile)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from syncd.auth.admin import ADMIN_TOKEN_FILE
from syncd.auth.revocations import REVOCATIONS_FILE
from tests.conftest import ADMIN, start_to_the_end


@pytest.mark.parametrize(
    ("name", "env", "expected"),
    [
        (ADMIN_TOKEN_FILE, {}, "admin token file {path} is not a regular file"),
        (
            REVOCATIONS_FILE,
            {"SERVICE_ADMIN_TOKEN": ADMIN},
            "revocations file {path} is not a regular file",
        ),
    ],
)
def test_a_fifo_in_place_of_the_file_refuses_the_start(
    tmp_path: Path, name: str, env: dict[str, str], expected: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / name
    os.mkfifo(path)
    proc = start_to_the_end(data_dir, **env)
    err = proc.stderr.decode()
    assert proc.returncode != 0, err
    assert "Traceback" not in err, err
    assert expected.format(path=path) in err, err
