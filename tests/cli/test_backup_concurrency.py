"""One online backup at a time (``MAX_CONCURRENT_BACKUPS``), on a real server:
a backup asked for while another streams is 429 with ``Retry-After`` and the
running one goes on whole; once it ends, whichever way (finished, its client
gone mid-stream, its client gone before the stream began), the next one is
served (docs/operations.md#backup-and-restore)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.cli import main
from syncd.http.handlers.admin import BACKUP_RETRY_AFTER_S, MAX_CONCURRENT_BACKUPS
from tests.conftest import ADMIN
from tests.http.support import ADMIN_HEADERS, op

BACKUP = "/v1/admin/backup"
SLOW = BACKUP + "?max_rate=1"
"""1 MiB/s, the slowest taken: the store below (about 650 KB as a tar, its
values once in the log and once in the history) takes over half a second."""

FREED_WITHIN_S = 5.0
"""How long the server may take to notice that a backup has ended."""


def _whole(tar_bytes: bytes) -> list[str]:
    """The member names of a whole backup (it ends with its manifest)."""
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        names = tar.getnames()
    assert names[-1] == "MANIFEST.json", names
    return names


async def _refused(client: httpx.AsyncClient) -> None:
    r = await client.post(BACKUP, headers=ADMIN_HEADERS)
    assert r.status_code == 429, r.text[:300]
    assert r.headers["retry-after"] == str(BACKUP_RETRY_AFTER_S)
    assert r.json() == {
        "error": "rate_limited",
        "message": f"a backup is already in progress (at most {MAX_CONCURRENT_BACKUPS} "
        "at a time): ask again once it has ended",
        "retry_after": BACKUP_RETRY_AFTER_S,
    }


async def _served_once_freed(client: httpx.AsyncClient) -> None:
    """A backup is served once the server has seen the last one end."""
    deadline = time.monotonic() + FREED_WITHIN_S
    while True:
        r = await client.post(BACKUP, headers=ADMIN_HEADERS)
        if r.status_code != 429 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    assert r.status_code == 200, r.text[:300]
    _whole(r.content)


@pytest.mark.parametrize("http_parser", ["httptools"])
async def test_one_backup_at_a_time(server: Any, tmp_path: Path) -> None:
    assert MAX_CONCURRENT_BACKUPS == 1  # what the steps below count on
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        for i in range(4):
            r = await op(client, ADMIN_HEADERS, f"lw:big{i}", {"op": "set", "value": "x" * 80_000})
            assert r.status_code == 200, r.text[:300]

        # A slow backup streams; another is refused meanwhile, the slow one
        # goes on to its end, and then the next is served.
        async with client.stream("POST", SLOW, headers=ADMIN_HEADERS) as slow:
            assert slow.status_code == 200
            await _refused(client)
            # syncd backup says so in one line, exit 1, and leaves nothing.
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = await asyncio.to_thread(
                    main,
                    ["backup", str(tmp_path / "copy"), "--url", server.url],
                    {**os.environ, "SERVICE_ADMIN_TOKEN": ADMIN},
                )
            assert code == 1 and err.getvalue().count("\n") == 1, err.getvalue()
            assert "refused the backup: 429 rate_limited: a backup is already in progress" in (
                err.getvalue()
            )
            assert not (tmp_path / "copy").exists()
            body = await slow.aread()
        _whole(body)
        await _served_once_freed(client)

        # Its client leaves mid-stream: the slot is free again.
        async with client.stream("POST", SLOW, headers=ADMIN_HEADERS) as slow:
            assert slow.status_code == 200
            await _refused(client)
            async for _ in slow.aiter_raw():
                break  # one piece, then the connection is closed
        await _served_once_freed(client)

        # Its client leaves before the stream began: also free again.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            f"POST {SLOW} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN}\r\n"
            "content-length: 0\r\n\r\n".encode()
        )
        writer.close()
        await writer.wait_closed()
        await _served_once_freed(client)
