"""Online backup under write load, restore by starting on the copy, and verify
(the syncd backup and syncd verify commands: tests/cli/test_backup.py)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import math
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.http.handlers.admin import MAX_RATE_LIMIT_MIB_S, MIN_RATE_LIMIT_MIB_S
from syncd.store.embedded.verify import MAX_UNLISTED_NAMED, verify
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
        # Every member dated now or by its file, none in 1970 (age-based clean-up).
        assert all(abs(m.mtime - time.time()) < 3600 for m in tar.getmembers())
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


@pytest.mark.parametrize(
    "rate",
    ["0", "-1", "abc", "1e9", "nan", "inf", "1e-9", "0.000001", "", "%D9%A1", "1_0", "%201", "+1"],
)
async def test_a_bad_max_rate_is_400(server: RunningServer, rate: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(f"/v1/admin/backup?max_rate={rate}", headers=ADMIN_HEADERS)
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        assert r.json()["message"].startswith("max_rate: MiB per second, at least 1 ")
    # Refused before the store is held: snapshots run at once.
    await asyncio.wait_for(server.app.store.compact_now(), 10)


async def test_max_rate_at_its_bounds(server: RunningServer) -> None:
    below = math.nextafter(MIN_RATE_LIMIT_MIB_S, 0)
    above = math.nextafter(MAX_RATE_LIMIT_MIB_S, math.inf)
    async with httpx.AsyncClient(base_url=server.url) as client:
        for rate, status in (
            (MIN_RATE_LIMIT_MIB_S, 200),
            (below, 400),
            (MAX_RATE_LIMIT_MIB_S, 200),
            (above, 400),
        ):
            r = await client.post(
                f"/v1/admin/backup?max_rate={rate!r}", headers=ADMIN_HEADERS, timeout=60
            )
            assert r.status_code == status, (rate, r.text)
            if status == 200:
                assert r.content.endswith(b"\0" * 1024)  # a whole tar


# The pacing is the answer's, not the request's: one HTTP parser is enough here.
@pytest.mark.parametrize("http_parser", ["httptools"])
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
        f"POST /v1/admin/backup?max_rate={MIN_RATE_LIMIT_MIB_S!r} HTTP/1.1\r\nhost: x\r\n".encode()
        + f"authorization: Bearer {ADMIN}\r\ncontent-length: 0\r\n\r\n".encode()
    )
    await writer.drain()
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    await reader.read(1000)
    writer.close()  # gone half-way
    # Snapshots (which wait while a backup holds the store) run again soon.
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


async def _unpacked_backup(make_server: Any, tmp_path: Path) -> bytes:
    server: RunningServer = await make_server()
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for i in range(30):
            await op(client, h, "pn:c", {"op": "increment", "amount": i + 1})
        await server.app.store.compact_now()
        for _ in range(5):
            await op(client, h, "pn:c", {"op": "decrement"})
        _, tar_bytes, _ = await _backup_tar(client)
    return tar_bytes


def _unpack(tar_bytes: bytes, dest: Path) -> Path:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        tar.extractall(dest, filter="data")
    assert verify(str(dest)).ok
    return dest


async def test_verify_refuses_a_backup_holding_files_its_manifest_does_not_list(
    make_server: Any, tmp_path: Path
) -> None:
    tar_bytes = await _unpacked_backup(make_server, tmp_path)

    def problems(name: str, change: Any) -> list[str]:
        copy = _unpack(tar_bytes, tmp_path / name)
        change(copy)
        report = verify(str(copy))
        assert not report.ok and "DAMAGED" in report.text(), name
        return report.problems

    # A log segment past the copy's end: a server started on it would replay it.
    def extra_segment(root: Path) -> None:
        (root / "log" / "00000000000000099999.seg").write_bytes(b"")

    assert (
        "log/00000000000000099999.seg: not in the manifest (not part of the backup as taken)"
        in problems("segment", extra_segment)
    )
    assert problems("top", lambda root: (root / "notes.txt").write_text("x")) == [
        "notes.txt: not in the manifest (not part of the backup as taken)"
    ]
    assert problems("subdir", lambda root: (root / "history" / "old").mkdir()) == [
        "history/old/: not in the manifest (not part of the backup as taken)"
    ]

    def many(root: Path) -> None:
        for i in range(MAX_UNLISTED_NAMED + 5):
            (root / f"stray-{i:03d}").write_text("x")

    found = problems("many", many)
    assert len(found) == MAX_UNLISTED_NAMED + 1
    assert found[0] == "stray-000: not in the manifest (not part of the backup as taken)"
    assert found[-1] == "and 5 more files not in the manifest"

    def list_nothing(root: Path) -> None:
        manifest = json.loads((root / "MANIFEST.json").read_text())
        manifest["files"] = []
        (root / "MANIFEST.json").write_text(json.dumps(manifest))

    found = problems("unlisted-all", list_nothing)
    assert found and all("not in the manifest" in p for p in found)
    # A data directory (no manifest) is not a backup: its files are its own.
    plain = _unpack(tar_bytes, tmp_path / "plain")
    (plain / "MANIFEST.json").unlink()
    (plain / "notes.txt").write_text("x")
    assert verify(str(plain)).ok


async def test_verify_names_a_bad_manifest_and_reads_nothing_outside_the_backup(
    make_server: Any, tmp_path: Path
) -> None:
    tar_bytes = await _unpacked_backup(make_server, tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")

    def with_files(name: str, files: Any) -> list[str]:
        copy = _unpack(tar_bytes, tmp_path / name)
        manifest = json.loads((copy / "MANIFEST.json").read_text())
        manifest["files"] = files
        (copy / "MANIFEST.json").write_text(json.dumps(manifest))
        report = verify(str(copy))  # no exception, whatever the manifest holds
        assert not report.ok, name
        return report.problems

    digest = hashlib.sha256(b"secret").hexdigest()
    for number, (files, expected) in enumerate(
        [
            ([{}], "MANIFEST.json: file 1: expected {path, bytes, sha256}"),
            ("abc", "MANIFEST.json: no list of files"),
            ({"a": 1}, "MANIFEST.json: no list of files"),
            ([{"path": "x", "bytes": "1", "sha256": "0"}], "expected {path, bytes, sha256}"),
            ([{"path": "../outside", "bytes": 6, "sha256": digest}], "is not a path inside"),
            ([{"path": str(outside), "bytes": 6, "sha256": digest}], "is not a path inside"),
            ([{"path": "log/./x", "bytes": 6, "sha256": digest}], "is not a path inside"),
        ]
    ):
        found = with_files(f"m{number}", files)
        assert any(expected in p for p in found), (files, found)
    copy = _unpack(tar_bytes, tmp_path / "notjson")
    (copy / "MANIFEST.json").write_text("[1, 2]")
    assert verify(str(copy)).problems == ["MANIFEST.json: not a syncd-backup manifest"]

    # A listed file replaced by a link to the very same bytes is not the file taken.
    linked = _unpack(tar_bytes, tmp_path / "linked")
    (segment,) = (linked / "log").iterdir()
    target = tmp_path / "moved.seg"
    segment.rename(target)
    segment.symlink_to(target)
    found = verify(str(linked)).problems
    assert f"log/{segment.name}: a symbolic link, not the file the backup took" in found
    # A layout directory replaced by a link is not the backup's directory either.
    moved = _unpack(tar_bytes, tmp_path / "moved")
    (moved / "history").rename(tmp_path / "history-elsewhere")
    (moved / "history").symlink_to(tmp_path / "history-elsewhere")
    assert "history/: not in the manifest (not part of the backup as taken)" in (
        verify(str(moved)).problems
    )
