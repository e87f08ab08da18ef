"""``--token-file PATH`` for ``syncd backup`` and ``syncd mcp``: a secret on
the command line is visible to every user of the machine in ``ps``; in a
file (or the environment) it is not. The file's line end is not part of it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from syncd.cli import build_parser, main
from syncd.cli.mcp import settings
from tests.conftest import ADMIN
from tests.http.support import issue, op


async def test_backup_reads_the_admin_secret_from_a_file(spawn_server: Any, tmp_path: Path) -> None:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        await op(client, h, "pn:c", {"op": "increment", "amount": 1})
    secret = tmp_path / "admin-secret"
    secret.write_text(ADMIN + "\n")
    env = {k: v for k, v in os.environ.items() if k != "SERVICE_ADMIN_TOKEN"}
    env["SERVICE_DATA_DIR"] = str(tmp_path / "nowhere")
    dest = tmp_path / "copy"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "syncd",
            "backup",
            str(dest),
            "--url",
            server.url,
            "--token-file",
            str(secret),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (dest / "MANIFEST.json").is_file()


def test_backup_names_a_token_file_it_cannot_read(tmp_path: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["backup", str(tmp_path / "copy"), "--token-file", str(tmp_path / "missing")], env={}
        )
    assert code == 2
    assert err.getvalue() == (
        f"syncd backup: --token-file {tmp_path / 'missing'}: No such file or directory\n"
    )
    assert not (tmp_path / "copy").exists()


def test_backup_refuses_both_token_flags(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("x")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["backup", str(tmp_path / "c"), "--token", "x", "--token-file", str(tmp_path / "t")],
            env={},
        )
    assert code == 2 and "not both" in err.getvalue()


def test_mcp_reads_the_token_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("the-token\r\n")
    args = build_parser({}).parse_args(
        [
            "mcp",
            "--base-url",
            "http://h",
            "--namespace",
            "n",
            "--crdt",
            "gc:a",
            "--token-file",
            str(tmp_path / "t"),
        ],
    )
    assert settings(args, {"SYNCD_TOKEN": "env"})[1] == "the-token"


def test_mcp_names_a_token_file_it_cannot_read(tmp_path: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            [
                "mcp",
                "--base-url",
                "http://h",
                "--namespace",
                "n",
                "--crdt",
                "gc:a",
                "--token-file",
                str(tmp_path / "missing"),
            ],
            env={},
        )
    assert code == 2
    assert err.getvalue().startswith(f"syncd mcp: --token-file {tmp_path / 'missing'}: No such")


def test_the_help_prefers_the_environment() -> None:
    for command in ("backup", "mcp"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([command, "--help"], env={})
        text = " ".join(out.getvalue().split())
        assert "--token-file" in text and "ps: prefer" in text, text
