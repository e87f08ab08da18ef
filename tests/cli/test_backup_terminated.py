"""``syncd backup`` stopped with SIGTERM (``timeout 1h syncd backup ...``, a
``kill``, a systemd timer's unit stopped) or SIGHUP (the terminal or SSH
session that ran it gone) is stopped as Ctrl-C stops it: one line, ``DEST``
as it was, and the shell's status for the signal (143, 129). It was killed
where it stood, leaving a half-unpacked copy behind. Under ``nohup`` SIGHUP
stays ignored."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from syncd.cli import main
from tests.cli.support import backup_signalled_on_open, server_to_back_up
from tests.conftest import ADMIN


@pytest.fixture
async def url(spawn_server: Any) -> str:
    return await server_to_back_up(spawn_server)


@pytest.mark.parametrize(
    ("stop", "word"), [(signal.SIGTERM, "terminated"), (signal.SIGHUP, "hung up")]
)
@pytest.mark.parametrize("step", ["/log/", "/history/", "/MANIFEST.json"])
def test_a_stopped_backup_says_so_and_leaves_dest_as_it_was(
    url: str, tmp_path: Path, step: str, stop: signal.Signals, word: str
) -> None:
    dest = tmp_path / "copy"
    done = backup_signalled_on_open(dest, url, stop, under=str(dest), containing=step)
    assert done.returncode == 128 + stop, done.stderr
    assert done.stderr == f"syncd backup: {word}; {dest} is as it was\n"
    assert not dest.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    done = backup_signalled_on_open(empty, url, stop, under=str(empty), containing=step)
    assert done.returncode == 128 + stop and list(empty.iterdir()) == []


def test_under_nohup_a_hangup_changes_nothing(url: str, tmp_path: Path) -> None:
    dest = tmp_path / "copy"
    code = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"  # what nohup does
        "def hook(event, args):\n"
        "    if event == 'open' and isinstance(args[0], str)"
        f" and args[0].startswith({str(dest)!r}) and '/history/' in args[0]:\n"
        "        os.kill(os.getpid(), signal.SIGHUP)\n"
        "sys.addaudithook(hook)\n"
        "from syncd.cli import main\n"
        f"sys.exit(main(['backup', {str(dest)!r}, '--url', {url!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (dest / "MANIFEST.json").is_file()


def test_the_handlers_are_put_back_after_a_run_in_this_process(url: str, tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            ["backup", str(tmp_path / "copy"), "--url", url], {"SERVICE_ADMIN_TOKEN": ADMIN}
        )
    assert code == 0, err.getvalue()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before
