"""Online backup under write load, restore by starting on the copy, and verify
(the syncd backup and syncd verify commands: tests/cli/test_backup.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.store.embedded.verify import verify
from tests.conftest import ADMIN, RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op

NS_URL = "/v1/namespaces/app/crdts"


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def _writer(
    client: httpx.AsyncClient, h: dict[str, str], name: str, acked: list[Any], stop: asyncio.Event
) -> None:
    i = 0
    while not stop.is_set():
        element = f"{name}-{i}"
        r = await op(client, h, "or:acked", {"op": "add", "element": element})
        if r.status_code == 200:
            acked.append((time.monotonic(), element))
        i += 1


async def _backup_tar(client: httpx.AsyncClient) -> tuple[float, bytes, str]:
    sent = time.monotonic()
    r = await client.post("/v1/admin/backup", headers=ADMIN_HEADERS, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-tar"
    return sent, r.content, r.headers["x-syncd-backup-lsn"]


async def test_a_backup_under_load_holds_every_op_acknowledged_before_it(
    make_server: Any, tmp_path: Path
) -> None:
    server: RunningServer = await make_server(fsync="batch", rate_limit=1_000_000)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(300):  # history and a snapshot's worth of variety
            await op(client, h, "rg:doc", {"op": "insert", "index": i, "text": "x"})
        await server.app.store.compact_now()
        acked: list[Any] = []
        stop = asyncio.Event()
        writers = [asyncio.create_task(_writer(client, h, f"w{n}", acked, stop)) for n in range(4)]
        # Some acknowledged ops before the backup, however slow this machine's fsync is today.
        for _ in range(200):
            if len(acked) > 25:
                break
            await asyncio.sleep(0.05)
        sent, tar_bytes, lsn = await _backup_tar(client)
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*writers)
    before = {element for at, element in acked if at < sent}
    assert len(before) > 20 and int(lsn) > 300

    restored = tmp_path / "restored"
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        tar.extractall(restored, filter="data")
    assert (restored / "MANIFEST.json").exists()
    report = verify(str(restored))
    assert report.ok, report.text()
    copy: RunningServer = await make_server(data_dir=restored)
    async with httpx.AsyncClient(base_url=copy.url) as client:
        h = await issue(client)
        value = (await client.get(f"{NS_URL}/or:acked", headers=h)).json()["value"]
        assert before <= set(value)
        doc = (await client.get(f"{NS_URL}/rg:doc", headers=h)).json()
        assert doc["text"] == "x" * 300
        # The history came along: the document as it was half-way.
        half = (await client.get(f"{NS_URL}/rg:doc?at=150", headers=h)).json()
        assert half["text"] == "x" * 150
    # No work files are left behind in the source's data directory.
    assert not [p for p in server.app.settings.data_dir.iterdir() if p.name.startswith(".backup-")]


async def test_backup_needs_the_root_admin(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, admin=True)  # a namespace admin is not enough
        r = await client.post("/v1/admin/backup", headers=h)
        assert r.status_code == 403
        assert (await client.post("/v1/admin/backup")).status_code == 401


@pytest.mark.parametrize("rate", ["0", "-1", "abc", "1e9"])
async def test_a_bad_max_rate_is_400(server: RunningServer, rate: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(f"/v1/admin/backup?max_rate={rate}", headers=ADMIN_HEADERS)
        assert r.status_code == 400 and r.json()["error"] == "bad_request"


async def test_max_rate_spreads_the_backup_over_time(make_server: Any) -> None:
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(40):
            await op(client, h, "or:big", {"op": "add", "element": f"{i:04d}" + "x" * 30000})
        started = time.monotonic()
        r = await client.post("/v1/admin/backup?max_rate=1", headers=ADMIN_HEADERS, timeout=60)
        took = time.monotonic() - started
    assert r.status_code == 200
    size = len(r.content)
    assert size > 1_200_000
    # At 1 MiB/s the last piece cannot leave before size / rate, less the
    # first piece, which goes at once.
    assert took >= (size - 256 * 1024) / (1024 * 1024) * 0.9


async def test_a_client_leaving_mid_backup_releases_the_store(make_server: Any) -> None:
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(40):
            await op(client, h, "or:big", {"op": "add", "element": f"{i:04d}" + "x" * 30000})
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /v1/admin/backup?max_rate=0.5 HTTP/1.1\r\nhost: x\r\n"
        + f"authorization: Bearer {ADMIN}\r\ncontent-length: 0\r\n\r\n".encode()
    )
    await writer.drain()
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    await reader.read(1000)
    writer.close()  # gone half-way
    # Snapshots (which wait while a backup holds the store) run again soon.
    await asyncio.wait_for(server.app.store.compact_now(), 10)


async def test_a_client_leaving_a_very_slow_backup_releases_the_store_at_once(
    make_server: Any,
) -> None:
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(20):
            await op(client, h, "or:big", {"op": "add", "element": f"{i:04d}" + "x" * 30000})
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(  # about one byte a second: the pause after the first piece is days long
        b"POST /v1/admin/backup?max_rate=0.000001 HTTP/1.1\r\nhost: x\r\n"
        + f"authorization: Bearer {ADMIN}\r\ncontent-length: 0\r\n\r\n".encode()
    )
    await writer.drain()
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    await reader.read(1000)
    writer.close()
    # The pause ends with the connection (it used to sleep on, holding the
    # store: snapshots, and a stopping server's close, waited for good).
    await asyncio.wait_for(server.app.store.compact_now(), 10)


async def test_verify_finds_damage_and_changes_nothing(make_server: Any, tmp_path: Path) -> None:
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(50):
            await op(client, h, "pn:c", {"op": "increment", "amount": i + 1})
        await server.app.store.compact_now()
        for _ in range(20):
            await op(client, h, "pn:c", {"op": "decrement"})
        _, tar_bytes, _ = await _backup_tar(client)
    good = tmp_path / "good"
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        tar.extractall(good, filter="data")
    before = _tree_digest(good)
    report = verify(str(good))
    assert report.ok and report.manifest and report.records == 20 and report.snapshot_lsn == 50
    assert _tree_digest(good) == before  # read-only

    def damaged(name: str, change: Any) -> str:
        copy = tmp_path / name
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
            tar.extractall(copy, filter="data")
        change(copy)
        result = verify(str(copy))
        assert not result.ok, name
        return result.text()

    def flip_segment_byte(root: Path) -> None:
        (segment,) = (root / "log").iterdir()
        data = bytearray(segment.read_bytes())
        data[len(data) // 2] ^= 0xFF
        segment.write_bytes(bytes(data))

    def cut_snapshot(root: Path) -> None:
        (snap,) = (root / "snapshots").iterdir()
        snap.write_bytes(snap.read_bytes()[:-10])

    def edit_manifest(root: Path) -> None:
        manifest = json.loads((root / "MANIFEST.json").read_text())
        manifest["files"][0]["sha256"] = "0" * 64
        (root / "MANIFEST.json").write_text(json.dumps(manifest))

    text = damaged("flipped", flip_segment_byte)
    assert "DAMAGED" in text and ".seg" in text
    assert "snapshot" in damaged("cut", cut_snapshot)
    assert "SHA-256" in damaged("manifest", edit_manifest)
    assert not verify(str(tmp_path / "nowhere")).ok


@pytest.mark.timeout(60)
async def test_postgresql_answers_409_pointing_at_pg_dump(make_server: Any, pg_url: str) -> None:
    server: RunningServer = await make_server(database_url=pg_url)
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/v1/admin/backup", headers=ADMIN_HEADERS)
        assert r.status_code == 409 and r.json()["error"] == "unsupported"
        assert "pg_dump" in r.json()["message"]
