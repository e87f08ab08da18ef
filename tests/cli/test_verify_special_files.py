"""``syncd verify PATH`` where PATH is no directory and no regular file: a FIFO,
a character device. Only a regular file is looked at as a saved tar; the
others are "not a directory" at once. Opening a FIFO to see whether it held a
tar waited for a writer for ever, and /dev/zero was read for ever."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_special_file_is_not_a_directory_at_once(kind: str, tmp_path: Path) -> None:
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    else:
        path = Path(kind)
        if not path.exists():
            pytest.skip(f"no {kind} here")
    done = _verify(path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"syncd verify: {path}: not a directory\n"
    assert done.stdout == ""
