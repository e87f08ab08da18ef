"""``syncd backup`` stopped with SIGTERM (``timeout 1h syncd backup ...``, a
``kill``, a systemd timer's unit stopped) is stopped as Ctrl-C stops it: one
line, ``DEST`` as it was, and the shell's status for SIGTERM (143). It was
killed where it stood, leaving a half-unpacked copy behind."""

from __future__ import annotations

import contextlib
import io
import signal
from pathlib import Path
from typing import Any

import pytest

from syncd.cli import main
from tests.cli.support import backup_signalled_on_open, server_to_back_up
from tests.conftest import ADMIN


@pytest.fixture
async def url(spawn_server: Any) -> str:
    return await server_to_back_up(spawn_server)


@pytest.mark.parametrize("step", ["/log/", "/history/", "/MANIFEST.json"])
def test_a_terminated_backup_says_so_and_leaves_dest_as_it_was(
    url: str, tmp_path: Path, step: str
) -> None:
    dest = tmp_path / "copy"
    done = backup_signalled_on_open(dest, url, signal.SIGTERM, under=str(dest), containing=step)
    assert done.returncode == 143, done.stderr
    assert done.stderr == f"syncd backup: terminated; {dest} is as it was\n"
    assert not dest.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    done = backup_signalled_on_open(empty, url, signal.SIGTERM, under=str(empty), containing=step)
    assert done.returncode == 143 and list(empty.iterdir()) == []


def test_the_handler_is_put_back_after_a_run_in_this_process(url: str, tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            ["backup", str(tmp_path / "copy"), "--url", url], {"SERVICE_ADMIN_TOKEN": ADMIN}
        )
    assert code == 0, err.getvalue()
    assert signal.getsignal(signal.SIGTERM) is before
