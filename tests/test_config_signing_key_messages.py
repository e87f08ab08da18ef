"""A refused SERVICE_SIGNING_KEY says what is wrong with it without showing
it: a valid key with a space or line break around it (an env file's stray
space) was refused as "must be 64 hex characters" while its 64 hex
characters were plainly there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env

KEY = "ab" * 32


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (KEY + " ", "has spaces or line breaks around its 64 hex characters: remove them"),
        ("\t" + KEY + "\n", "has spaces or line breaks around its 64 hex characters: remove them"),
        (KEY[:-2], "must be 64 hex characters (a 32-byte ed25519 seed), not 62"),
        (KEY[:-1] + "g", "must be 64 hex characters (a 32-byte ed25519 seed): it holds others"),
    ],
)
def test_the_problem_is_named_never_the_key(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_SIGNING_KEY": value})
    assert str(info.value) == f"SERVICE_SIGNING_KEY: {message}"
    assert "abab" not in str(info.value)


def test_a_real_start_says_so_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            "PATH": "/usr/bin:/bin",
            "SERVICE_SIGNING_KEY": KEY + " ",
            "SERVICE_DATA_DIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "syncd: SERVICE_SIGNING_KEY: has spaces or line breaks around its 64 hex"
        " characters: remove them\n"
    )
