"""``syncd backup`` given a stream that is not a whole backup: cut short, with
names outside the destination, links, special files, nothing at all. The
real server's tar, damaged on the way, is served by a stand-in for what sits
between (a proxy, a network that drops the connection): one line naming the
problem, exit 1, nothing left behind, nothing written outside DEST."""

from __future__ import annotations

import contextlib
import http.server
import io
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from syncd.cli import main
from syncd.http.handlers.admin import MAX_RATE_LIMIT_MIB_S, MIN_RATE_LIMIT_MIB_S
from tests.conftest import ADMIN
from tests.http.support import ADMIN_HEADERS, issue, op


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``syncd backup ARGS`` in this process (a process start per case made
    this file a tenth of a second per case slower; tests/cli/test_backup.py
    runs the command as a process)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["backup", *args], {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN})
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("syncd backup: "), done.stderr
    return done.stderr


@contextlib.contextmanager
def serving(body: bytes, *, torn_chunk: bool = False) -> Iterator[str]:
    """An HTTP server answering every POST with ``body`` as the backup, then
    closing the connection (as syncd's stream ends); ``torn_chunk``: as one
    chunk of a chunked answer that promises more bytes than come (a proxy
    that re-chunks the stream, dropped half-way)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/x-tar")
            self.send_header("connection", "close")
            if torn_chunk:
                self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            if torn_chunk:
                self.wfile.write(f"{len(body) * 2:x}\r\n".encode())
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll: shutdown() waits for it, once per case.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def _real_backup(spawn_server: Any) -> bytes:
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(20):
            await op(client, h, "or:s", {"op": "add", "element": f"{i}" + "x" * 2000})
        r = await client.post("/v1/admin/backup", headers=ADMIN_HEADERS, timeout=60)
        assert r.status_code == 200
        return r.content


def _members(tar_bytes: bytes) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return [
            (m, tar.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
            for m in tar.getmembers()
        ]


def _with_extra(tar_bytes: bytes, extra: tarfile.TarInfo, data: bytes = b"") -> bytes:
    """The backup with ``extra`` added just before its manifest."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for member, content in _members(tar_bytes):
            if member.name == "MANIFEST.json":
                extra.size = len(data) if extra.isreg() else 0
                tar.addfile(extra, io.BytesIO(data) if extra.isreg() else None)
            tar.addfile(member, io.BytesIO(content) if content is not None else None)
    return out.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def _refused(body: bytes, dest: Path, expected: str, *, torn_chunk: bool = False) -> None:
    with serving(body, torn_chunk=torn_chunk) as url:
        done = run_cli(str(dest), "--url", url)
    assert done.returncode == 1 and expected in one_line(done), done.stderr
    assert not dest.exists()


async def test_a_stream_cut_short_is_refused(spawn_server: Any, tmp_path: Path) -> None:
    whole = await _real_backup(spawn_server)
    with serving(whole) as url:  # the stand-in passes a whole backup on as is
        done = run_cli(str(tmp_path / "whole"), "--url", url)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr
    members = _members(whole)
    manifest = next(m for m, _ in members if m.name == "MANIFEST.json")
    last_file = members[-2][0]
    # Cut at a member's edge, the tar reads as whole: only the missing manifest shows.
    _refused(whole[: manifest.offset], tmp_path / "a", "ended before its MANIFEST.json")
    _refused(whole[: last_file.offset], tmp_path / "b", "ended before its MANIFEST.json")
    _refused(b"\0" * 10240, tmp_path / "c", "ended before its MANIFEST.json")
    _refused(whole[: last_file.offset_data + 100], tmp_path / "d", "cut short")
    _refused(b"", tmp_path / "e", "not a whole tar")
    _refused(
        whole,
        tmp_path / "g",
        "the answer broke off before its end (IncompleteRead)",
        torn_chunk=True,
    )
    _refused(b"HTTP/1.1 200 OK\r\n\r\nnot a tar" * 100, tmp_path / "f", "not a whole tar")


async def test_names_links_and_special_files_are_refused(spawn_server: Any, tmp_path: Path) -> None:
    whole = await _real_backup(spawn_server)
    outside = tmp_path / "outside"
    for number, (extra, expected) in enumerate(
        [
            (_member("../escaped"), "'../escaped' is not a path inside the backup"),
            (_member(str(outside)), f"{str(outside)!r} is not a path inside the backup"),
            (_member("log/../../escaped"), "is not a path inside the backup"),
            (_member("log/evil", tarfile.SYMTYPE, "/etc/passwd"), "is not a regular file"),
            (
                _member(
                    "log/00000000000000000999.seg", tarfile.SYMTYPE, "00000000000000000001.seg"
                ),
                "is not a regular file",
            ),
            (_member("history/x", tarfile.LNKTYPE, "MANIFEST.json"), "is not a regular file"),
            (_member("log/fifo", tarfile.FIFOTYPE), "is not a regular file"),
            (_member("log/dev", tarfile.CHRTYPE), "is not a regular file"),
            (_member("elsewhere", tarfile.DIRTYPE), "is a directory a backup does not have"),
            (_member("log"), "comes twice"),
        ]
    ):
        _refused(_with_extra(whole, extra, b"x"), tmp_path / f"d{number}", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "server0.log"]


async def test_a_file_the_manifest_does_not_list_fails_the_backup(
    spawn_server: Any, tmp_path: Path
) -> None:
    whole = await _real_backup(spawn_server)
    body = _with_extra(whole, _member("notes.txt"), b"not from the server")
    dest = tmp_path / "copy"
    with serving(body) as url:
        done = run_cli(str(dest), "--url", url)
    assert done.returncode == 1, done.stdout
    assert "DAMAGED" in done.stdout and "notes.txt: not in the manifest" in done.stdout
    checked = subprocess.run(
        [sys.executable, "-m", "syncd", "verify", str(dest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 1 and "notes.txt: not in the manifest" in checked.stdout


async def test_max_rate_out_of_bounds_is_one_line_before_asking(
    spawn_server: Any, tmp_path: Path
) -> None:
    dest = tmp_path / "copy"
    # Not even an unreachable server is tried: the bound is checked first.
    below = MIN_RATE_LIMIT_MIB_S * 0.9999999  # ":g" would print (and send) it as 1
    for rate in (repr(below), "1e-9", "0", "-1", "nan", "inf", repr(MAX_RATE_LIMIT_MIB_S * 2)):
        done = run_cli(str(dest), "--url", "http://127.0.0.1:1", "--max-rate", rate)
        assert done.returncode == 2, (rate, done.stderr)
        line = one_line(done)
        assert "--max-rate" in line and "MiB per second, at least 1 " in line, line
        assert not dest.exists()
    assert repr(below) in one_line(
        run_cli(str(dest), "--url", "http://127.0.0.1:1", "--max-rate", repr(below))
    )
    done = run_cli(str(dest), "--url", "http://127.0.0.1:1", "--max-rate", "fast")
    assert done.returncode == 2 and "invalid float value: 'fast'" in done.stderr
    server = spawn_server({})
    done = run_cli(str(dest), "--url", server.url, "--max-rate", repr(MIN_RATE_LIMIT_MIB_S))
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr
