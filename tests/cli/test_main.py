"""The ``syncd`` command line as a whole: the command list, ``--help`` for every
command, ``--version``, ``keygen``, and what happens without a command."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from syncd.cli import COMMANDS, main

NAMES = ("serve", "keygen", "token", "backup", "verify", "mcp", "health")


def test_help_lists_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "syncd", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for command in NAMES:
        assert command in result.stdout


HEAVY = ("syncd.config", "syncd.crdt", "syncd.auth", "pycrdt", "prometheus_client", "nacl")
"""What the settings' defaults and the token issuer import: 0.35 s of CPU
that a command's start (a container's health check every 10 s) would pay
before doing anything, on top of the 0.15 s the command line costs."""


def test_help_and_a_health_check_import_none_of_the_service() -> None:
    code = (
        "import sys\n"
        "from syncd.cli import main\n"
        "assert main(['--help']) == 0\n"
        # Nobody listens on port 1: refused, unhealthy.
        "assert main(['health'], {'SERVICE_BIND': '127.0.0.1:1'}) == 1\n"
        f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_every_command_module_is_registered() -> None:
    assert [module.__name__.rsplit(".", 1)[1] for module in COMMANDS] == list(NAMES)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", NAMES)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"], env={}) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: syncd {command} ")
    assert "-h, --help" in out


def test_version_names_the_parser() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "syncd", "--version"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SERVICE_HTTP_PARSER": "h11"},
    )
    assert out.stdout.startswith("syncd 0.1.0") and "http parser: h11" in out.stdout


def test_keygen_prints_a_signing_key() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "syncd", "keygen"], capture_output=True, text=True, check=True
    )
    key = out.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    again = subprocess.run(
        [sys.executable, "-m", "syncd", "keygen"], capture_output=True, text=True, check=True
    )
    assert again.stdout.strip() != key


def test_no_command_means_serve(capsys: pytest.CaptureFixture[str]) -> None:
    # A bad setting stops serve before anything binds: the settings were read.
    assert main([], env={"SERVICE_BIND": "nope"}) == 2
    assert capsys.readouterr().err.startswith("syncd: SERVICE_BIND: ")


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["keygen", "extra"], "syncd keygen: error: unrecognized arguments: extra"),
        (["sundial"], "syncd: error: argument COMMAND: invalid choice"),
        (["verify"], "syncd verify: error: the following arguments are required: dir"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv, env={}) == 2
    err = capsys.readouterr().err
    assert prefix in err and err.startswith("usage: ")


@pytest.mark.parametrize("choice", ["HTTPTOOLS", "bogus", " h11"])
def test_version_with_a_parser_setting_serve_refuses(
    choice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "HTTPTOOLS (not installed)" beside "available: h11, httptools":
    # the setting is no parser's name, which is why serve refuses it.
    assert main(["--version"], env={"SERVICE_HTTP_PARSER": choice}) == 0
    out = capsys.readouterr().out
    assert f"http parser: {choice!r} is not a parser (auto, h11, httptools)" in out, out
    assert "not installed" not in out
