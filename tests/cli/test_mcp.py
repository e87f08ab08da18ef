"""``syncd mcp``: the command line's refusals (one line, exit 2, before any I/O),
flags before the environment, and the extra it needs (the server itself:
tests/client/test_client_mcp.py)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from syncd.cli import build_parser, main
from syncd.cli.mcp import ENV_NAMES, settings
from tests.cli.support import run_without
from tests.client.conftest import NS, make_token, now_ms

REPO = Path(__file__).resolve().parents[2]

needs_client = pytest.mark.skipif(
    find_spec("httpx") is None or find_spec("websockets") is None,
    reason="the client (syncd[client] or syncd[mcp]) is not installed",
)


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "syncd", "mcp", *args],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **(env or {})},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "missing --base-url"),
        (
            [
                "--base-url",
                "http://h",
                "--token",
                "garbage",
                "--namespace",
                NS,
                "--crdt",
                "a:gcounter",
            ],
            "token",
        ),
        (["--base-url", "http://h", "--token", "T", "--namespace", NS], "--crdt"),
        (
            [
                "--base-url",
                "http://h",
                "--token",
                "T",
                "--namespace",
                NS,
                "--crdt",
                "gc:a-b",
                "--crdt",
                "gc:a_b",
            ],
            "share the tool name",
        ),
        (
            ["--base-url", "http://h", "--token", "T", "--namespace", NS, "--crdt", "a"],
            "prefixed id",
        ),
        (
            ["--base-url", "http://h", "--token", "T", "--namespace", NS, "--crdt", "a:sundial"],
            "prefixed id",
        ),
    ],
)
@needs_client
def test_bad_invocations_exit_2_with_a_message(args: list[str], message: str) -> None:
    # main() in-process: every one of these stops before any I/O.
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["mcp", *args], env={}) == 2
    assert message in err.getvalue() and err.getvalue().startswith("syncd mcp: ")


@needs_client
def test_expired_token_stops_the_real_command() -> None:
    expired = make_token(ttl_ms=1, issued_ms=now_ms() - 10_000)
    done = _run(
        ["--crdt", "a:gcounter"],
        {"SYNCD_BASE_URL": "http://127.0.0.1:9", "SYNCD_TOKEN": expired, "SYNCD_NAMESPACE": NS},
    )
    assert done.returncode == 2 and "expired" in done.stderr and done.stdout == ""


def test_flags_win_over_the_environment() -> None:
    env: dict[str, Any] = {
        "SYNCD_BASE_URL": "http://env",
        "SYNCD_TOKEN": "t",
        "SYNCD_NAMESPACE": "n",
    }
    args = build_parser(env).parse_args(
        ["mcp", "--base-url", "http://flag", "--crdt", "a:orset", "--crdt", "b:gcounter"]
    )
    assert settings(args, env) == (
        "http://flag",
        "t",
        "n",
        [("a", "orset"), ("b", "gcounter")],
    )


def test_without_its_extra_is_one_line() -> None:
    result = run_without(["mcp", "httpx", "websockets"], ["mcp", "--crdt", "gc:x"], {})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "pip install 'syncd[mcp]'" in result.stderr


@needs_client
def test_the_help_names_the_client_variables() -> None:
    from syncd.client.config import ENV_BASE_URL, ENV_NAMESPACE, ENV_TOKEN

    assert (ENV_BASE_URL, ENV_TOKEN, ENV_NAMESPACE) == ENV_NAMES


@needs_client
def test_a_bad_origin_exits_2_before_any_io() -> None:
    args = ["--base-url", "http://h", "--token", make_token(), "--namespace", NS]
    args += ["--crdt", "gc:a", "--origin", "x" * 129]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["mcp", *args], env={}) == 2
    assert err.getvalue().startswith("syncd mcp: origin ")


@needs_client
def test_a_bad_result_limit_exits_2_before_any_io() -> None:
    args = ["--base-url", "http://h", "--token", make_token(), "--namespace", NS]
    args += ["--crdt", "gc:a", "--max-result-chars", "10"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["mcp", *args], env={}) == 2
    assert err.getvalue().startswith("syncd mcp: max_result_chars 10: a whole number, at least")


@needs_client
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_bad_call_timeout_exits_2_before_any_io(value: str) -> None:
    args = ["--base-url", "http://h", "--token", make_token(), "--namespace", NS]
    args += ["--crdt", "gc:a", f"--call-timeout-s={value}"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["mcp", *args], env={}) == 2
    assert err.getvalue().startswith("syncd mcp: call_timeout_s ")
