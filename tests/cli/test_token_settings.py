"""``SERVICE_MAX_TOKEN_TTL_MS`` is checked alike by ``syncd token`` and ``syncd
serve``, and ``syncd token`` refuses any ``--rules`` in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from syncd.cli import main

KEY_HEX = "11" * 32
ARGS = ["token", "--namespace", "demo", "--client-id", "1", "--read", "*"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("-1", "must be at least 1, got -1"),
        ("0", "must be at least 1, got 0"),
        ("99999999999999999999999999", "must be at most"),
    ],
)
def test_token_refuses_what_the_server_refuses(
    value: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: -1 and 0 issued a token already expired (exit 0); a huge
    # value let --ttl-ms past 2**64 and died with msgpack's OverflowError.
    env = {"SERVICE_SIGNING_KEY": KEY_HEX, "SERVICE_MAX_TOKEN_TTL_MS": value}
    code = main([*ARGS, "--ttl-ms", "99999999999999999999999"], env)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("syncd token: SERVICE_MAX_TOKEN_TTL_MS: ") and words in err, err
    assert err.count("\n") == 1
    code = main(ARGS, env)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and words in err


def test_a_century_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    century = str(100 * 365 * 24 * 3600 * 1000)
    env = {"SERVICE_SIGNING_KEY": KEY_HEX, "SERVICE_MAX_TOKEN_TTL_MS": century}
    assert main([*ARGS, "--ttl-ms", century], env) == 0
    assert capsys.readouterr().out.strip()


def test_deeply_nested_rules_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"SERVICE_SIGNING_KEY": KEY_HEX}
    code = main(["token", "--namespace", "demo", "--client-id", "1", "--rules", "[" * 100_000], env)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == "syncd token: --rules is nested too deeply\n"


def test_the_server_refuses_a_max_ttl_it_could_not_issue(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
        "SERVICE_BIND": "127.0.0.1:0",
        "SERVICE_MAX_TOKEN_TTL_MS": "99999999999999999999999999",
    }
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("syncd: SERVICE_MAX_TOKEN_TTL_MS: must be at most ")
    assert done.stderr.count("\n") == 1
