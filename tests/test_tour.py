"""The README's curl tour and docs/quickstart.md, run as printed against a real server.

Every ```sh block marked ``<!-- tour -->`` runs, in order, in one bash session
against a server started here (``python -m syncd`` on a free port, so
``localhost:3000`` in the text becomes that port; ``make run`` lines are the
server this test started). Each sample answer printed under a command
(``# {...}`` or ``# data: ...``) is compared with what the command printed:
every field the sample shows must be there with the same value, except where
the sample elides it (``…`` or ``...``). Endless streams (``curl -N``) are
given a second to show their first events.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Subprocess

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- tour -->"
STREAM_SECONDS = 1.5
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


def check_sample(sample: str, printed: str) -> None:
    if sample.startswith("data: "):
        prefix = sample.rstrip("…").rstrip(".")
        assert printed.startswith(prefix), (sample, printed[:200])
        return
    sample = re.sub(r"\s+\(.*\)$", "", sample.split("   ")[0])  # a trailing remark
    # Elided numbers (``17...``) become strings the matcher skips.
    sample_json = json.loads(re.sub(r":(\d*)(…|\.\.\.)", r':"…"', sample))
    first = printed.strip().splitlines()[0] if printed.strip() else ""
    assert matches(sample_json, json.loads(first)), (sample, first)


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


def test_the_readme_tour_runs_as_printed(spawn_server: Spawn, tmp_path: Path) -> None:
    run_tour(ROOT / "README.md", spawn_server, tmp_path)


def test_the_quickstart_runs_as_printed(spawn_server: Spawn, tmp_path: Path) -> None:
    run_tour(ROOT / "docs" / "quickstart.md", spawn_server, tmp_path)


def test_the_steps_parser_pairs_commands_with_samples() -> None:
    plan = steps(["a=1\ncurl x \\\n  -d '{\n  }'\n# {\"ok\":true}\n\n# remark\nb\n"])
    assert plan == [("a=1\ncurl x \\\n  -d '{\n  }'", '{"ok":true}'), ("b", None)]
    assert matches({"a": 1, "e": "…"}, {"a": 1, "e": "x", "z": 2})
    assert not matches({"a": 1}, {"a": 2})
