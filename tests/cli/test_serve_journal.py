"""``syncd serve`` under systemd, whose journal files each stderr line at the
priority a ``<N>`` prefix gives it (info without one): when stderr is the
stream ``JOURNAL_STREAM`` names, warnings are ``<4>``, errors and refused
starts ``<3>``, and nothing else changes when it is not."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import SIGNING_KEY_HEX, free_port, wait_ready


def _stream_of(path: Path) -> str:
    stat = os.stat(path)
    return f"{stat.st_dev}:{stat.st_ino}"


def _serve(tmp_path: Path, env: dict[str, str], journal: str | None) -> list[str]:
    """Start, stop with SIGTERM; the lines on stderr (a file), which
    ``JOURNAL_STREAM`` names when ``journal`` is "self", or another file's."""
    log = tmp_path / "stderr"
    other = tmp_path / "other"
    log.touch()
    other.touch()
    full = {**os.environ, **env}
    full.pop("JOURNAL_STREAM", None)
    if journal == "self":
        full["JOURNAL_STREAM"] = _stream_of(log)
    elif journal == "other":
        full["JOURNAL_STREAM"] = _stream_of(other)
    port = free_port()
    full.setdefault("SERVICE_BIND", f"127.0.0.1:{port}")
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "syncd", "serve"], env=full, stderr=err)
    try:
        if env.get("SERVICE_BIND") is None:
            wait_ready(port, proc)
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return log.read_text().splitlines()


def _base(tmp_path: Path) -> dict[str, str]:
    return {"SERVICE_DATA_DIR": str(tmp_path / "data"), "SERVICE_FSYNC": "never"}


def test_lines_carry_their_priority_for_the_journal(tmp_path: Path) -> None:
    lines = _serve(tmp_path, _base(tmp_path), "self")  # no signing key: a warning
    assert lines and all(re.match(r"<[2-7]>", line) for line in lines), lines
    assert any(
        line.startswith("<4>WARNING syncd: SERVICE_SIGNING_KEY is unset") for line in lines
    ), lines
    assert any(line.startswith("<6>INFO syncd.server: syncd ") for line in lines), lines


def test_a_refused_start_is_an_error_for_the_journal(tmp_path: Path) -> None:
    env = {**_base(tmp_path), "SERVICE_BIND": "nope", "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX}
    lines = _serve(tmp_path, env, "self")
    assert lines == ["<3>syncd: SERVICE_BIND: 'nope': expected host:port"], lines


def test_another_stream_or_none_changes_nothing(tmp_path: Path) -> None:
    for journal in ("other", None):
        lines = _serve(tmp_path, _base(tmp_path), journal)
        assert lines and all(re.match(r"\d{4}-\d\d-\d\d ", line) for line in lines), lines
    env = {**_base(tmp_path), "SERVICE_BIND": "nope", "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX}
    assert _serve(tmp_path, env, "other") == ["syncd: SERVICE_BIND: 'nope': expected host:port"]


def test_a_data_directory_in_use_is_an_error_for_the_journal(tmp_path: Path) -> None:
    """The refusals the server itself finds once it opens the store (a data
    directory in use, damaged; a database that refuses the node) are errors
    for the journal too, like the ones syncd serve finds before."""
    base = {**_base(tmp_path), "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX}
    port = free_port()
    env = {**os.environ, **base, "SERVICE_BIND": f"127.0.0.1:{port}"}
    env.pop("JOURNAL_STREAM", None)
    holder = subprocess.Popen(
        [sys.executable, "-m", "syncd", "serve"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        wait_ready(port, holder)
        lines = _serve(tmp_path, {**base, "SERVICE_BIND": f"127.0.0.1:{free_port()}"}, "self")
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=30)
    assert len(lines) >= 1 and lines[-1].startswith("<3>syncd: "), lines
    assert "in use" in lines[-1], lines
