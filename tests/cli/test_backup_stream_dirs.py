"""``syncd backup`` given a stream with a file in a directory a backup does
not have, named only by the file's path (``elsewhere/x``, ``log/sub/x``, no
directory member of its own): refused before anything is trusted, as a
directory member of that name is (docs/operations.md#backup-and-restore:
"a directory other than log/, snapshots/ and history/"). It was unpacked,
its directory made on the way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.test_backup_stream import _member, _real_backup, _refused, _with_extra


async def test_a_file_in_a_directory_a_backup_does_not_have_is_refused(
    spawn_server: Any, tmp_path: Path
) -> None:
    whole = await _real_backup(spawn_server)
    for number, name in enumerate(["elsewhere/x", "log/sub/x", "history/a/b/c"]):
        expected = f"{name!r} is in a directory a backup does not have"
        _refused(_with_extra(whole, _member(name), b"x"), tmp_path / f"d{number}", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "server0.log"]
