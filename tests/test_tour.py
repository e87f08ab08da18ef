"""The README's curl tour and docs/quickstart.md, run as printed against a real server.

The README's tour is one block a reader pastes whole into a shell, so it runs
here as one ``bash -c`` of the block as printed. Its ``make run &`` line
starts the server, late on purpose (``make run`` on a fresh clone first
creates ``.venv``), so the block must wait for the server itself. Only the
port changes (``localhost:3000`` becomes a free one).

The quickstart's ``sh`` blocks marked ``<!-- tour -->`` run one command at a
time, in order, in one bash session against a server started here
(``python -m syncd`` on a free port; ``make run`` lines are that server).
Endless streams (``curl -N``) are given a second to show their first events.

Either way, each sample answer printed under a command (``# {...}`` or
``# data: ...``) is compared with what was printed: every field the sample
shows must be there with the same value, except where the sample elides it
(``…`` or ``...``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Subprocess, free_port

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- tour -->"
STREAM_SECONDS = 1.5
# How late the README's `make run &` brings the server up: long enough that a
# block that does not wait for it fails (its first request finds no server).
LATE_START_S = 2.0
ELIDED = ("…", "...")

Spawn = Any


def tour_blocks(path: Path) -> list[str]:
    text = path.read_text()
    blocks = re.findall(re.escape(MARKER) + r"\n```sh\n(.*?)```", text, flags=re.S)
    assert blocks, f"no tour blocks in {path}"
    return blocks


def steps(blocks: list[str]) -> list[tuple[str, str | None]]:
    """(command lines, sample answer or None) in order."""
    out: list[tuple[str, str | None]] = []
    command: list[str] = []
    for block in blocks:
        for line in block.splitlines():
            stripped = line.strip()
            if stripped.startswith("# ") and command and re.match(r"# [{\[]|# data: ", stripped):
                out.append(("\n".join(command), stripped[2:]))
                command = []
            elif stripped.startswith("#") or not stripped:
                if command and not _continues(command):
                    out.append(("\n".join(command), None))
                    command = []
            else:
                command.append(line)
        if command:
            out.append(("\n".join(command), None))
            command = []
    return out


def _continues(command: list[str]) -> bool:
    """An open quote or a trailing backslash: the command goes on."""
    text = "\n".join(command)
    return text.rstrip().endswith("\\") or text.count("'") % 2 == 1


def as_run(command: str, port: int) -> str:
    command = command.replace("localhost:3000", f"localhost:{port}")
    # The server this test started is the one `make run` would start.
    command = re.sub(r"^make run( &)?$", ":", command, flags=re.M)
    # A stream never ends by itself: show its first events, then stop.
    if "--max-time" not in command:
        command = command.replace("curl -sN ", f"curl -sN --max-time {STREAM_SECONDS} ")
    return command


def script(plan: list[tuple[str, str | None]], port: int) -> str:
    lines = ["set -uo pipefail"]
    for index, (command, _) in enumerate(plan):
        lines.append(f"printf '\\n@@step {index}\\n'")
        lines.append(as_run(command, port))
        lines.append(
            f"rc=$?; if [ $rc -ne 0 ] && [ $rc -ne 28 ]; then echo '@@failed {index}' $rc; fi"
        )
    return "\n".join(lines) + "\n"


def matches(sample: Any, actual: Any) -> bool:
    if isinstance(sample, str) and any(mark in sample for mark in ELIDED):
        return True
    if isinstance(sample, dict):
        return isinstance(actual, dict) and all(
            key in actual and matches(value, actual[key]) for key, value in sample.items()
        )
    if isinstance(sample, list):
        return (
            isinstance(actual, list)
            and len(sample) == len(actual)
            and all(matches(s, a) for s, a in zip(sample, actual, strict=True))
        )
    return bool(sample == actual)


def sample_matches(sample: str, line: str) -> bool:
    """Whether one printed line is what ``sample`` shows."""
    if sample.startswith("data: "):
        return line.startswith(sample.rstrip("…").rstrip("."))
    sample = re.sub(r"\s+\(.*\)$", "", sample.split("   ")[0])  # a trailing remark
    # Elided numbers (``17...``) become strings the matcher skips.
    sample_json = json.loads(re.sub(r":(\d*)(…|\.\.\.)", r':"…"', sample))
    try:
        actual = json.loads(line)
    except ValueError:
        return False
    return matches(sample_json, actual)


def check_sample(sample: str, printed: str) -> None:
    first = printed.strip().splitlines()[0] if printed.strip() else ""
    assert sample_matches(sample, first), (sample, first[:200])


def run_tour(doc: Path, spawn: Spawn, tmp_path: Path) -> None:
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.fail("the tour needs curl and jq (apt-get install curl jq)")
    env = {"SERVICE_ADMIN_TOKEN": "change-me", "SERVICE_FSYNC": "batch"}
    server: Subprocess = spawn(env)
    plan = steps(tour_blocks(doc))
    result = subprocess.run(
        ["bash", "-c", script(plan, server.port)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), **env},
    )
    assert "@@failed" not in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    printed = re.split(r"^@@step (\d+)\n", result.stdout, flags=re.M)
    outputs = {int(printed[i]): printed[i + 1] for i in range(1, len(printed), 2)}
    assert sorted(outputs) == list(range(len(plan))), result.stderr[-2000:]
    for index, (command, sample) in enumerate(plan):
        if sample is not None:
            try:
                check_sample(sample, outputs[index])
            except (AssertionError, ValueError, IndexError) as exc:
                raise AssertionError(f"{doc.name}: `{command}` printed {outputs[index]!r}") from exc


def pasted(block: str, port: int, pid_file: Path) -> str:
    """The README block as a reader pastes it, on ``port``; its ``make run &``
    starts the server ``LATE_START_S`` late and notes its pid."""
    assert re.search(r"^make run &", block, flags=re.M), "the tour starts the server"
    # Its output goes to a file: an inherited pipe would stay open after the block.
    log = pid_file.with_suffix(".log")
    server = (
        f"(sleep {LATE_START_S}; exec {sys.executable} -m syncd serve) >{log} 2>&1 &"
        f" echo $! > {pid_file}"
    )
    text = re.sub(r"^make run &.*$", server, block, flags=re.M)
    return text.replace("localhost:3000", f"localhost:{port}")


def stop(pid_file: Path) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError once it is gone
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


def test_the_readme_tour_runs_as_one_pasted_block(tmp_path: Path) -> None:
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.fail("the tour needs curl and jq (apt-get install curl jq)")
    (block,) = tour_blocks(ROOT / "README.md")
    port = free_port()
    pid_file = tmp_path / "server.pid"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        # What `make run` would use, but on a free port and a scratch directory.
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
    }
    try:
        result = subprocess.run(
            ["bash", "-c", pasted(block, port, pid_file)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        stop(pid_file)
    lines = result.stdout.splitlines()
    # Every sample answer, in order, among what the block printed.
    position = 0
    for command, sample in steps([block]):
        if sample is None:
            continue
        found = next(
            (i for i in range(position, len(lines)) if sample_matches(sample, lines[i])), None
        )
        assert found is not None, (
            f"`{command}` should print {sample!r}; the block printed:\n"
            + result.stdout[-3000:]
            + result.stderr[-3000:]
        )
        position = found + 1
    assert any(line.startswith("service_ops_total{") for line in lines), result.stdout[-2000:]


def test_the_quickstart_runs_as_printed(spawn_server: Spawn, tmp_path: Path) -> None:
    run_tour(ROOT / "docs" / "quickstart.md", spawn_server, tmp_path)


def test_the_steps_parser_pairs_commands_with_samples() -> None:
    plan = steps(["a=1\ncurl x \\\n  -d '{\n  }'\n# {\"ok\":true}\n\n# remark\nb\n"])
    assert plan == [("a=1\ncurl x \\\n  -d '{\n  }'", '{"ok":true}'), ("b", None)]
    assert matches({"a": 1, "e": "…"}, {"a": 1, "e": "x", "z": 2})
    assert not matches({"a": 1}, {"a": 2})
