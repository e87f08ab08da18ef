"""``syncd`` writing to a reader that has gone (``syncd verify DIR | head -1``,
``syncd keygen | false``): no traceback, and the shell's status for SIGPIPE."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SIGNING_KEY_HEX

COMMANDS = (
    ["keygen"],
    ["--version"],
    ["--help"],
    ["token", "--namespace", "app", "--client-id", "1", "--read", "*"],
    ["verify", "{data}"],
)


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0].lstrip("-"))
def test_a_reader_gone_is_no_traceback(argv: list[str], buffered: bool, tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()  # an empty data directory verifies OK
    env = {**os.environ, "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX}
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        # Each print is written at once: the error comes from inside the command.
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before a byte is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "syncd", *(a.format(data=tmp_path) for a in argv)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    if argv == ["--help"] and not buffered:
        # argparse writes help itself and ignores an OSError in the write.
        assert done.returncode == 0
    else:
        assert done.returncode == 141  # 128 + SIGPIPE: how a shell reports `yes | head -1`'s yes
