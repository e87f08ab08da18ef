"""``syncd backup`` given a stream with a file in a directory a backup does
not have, named only by the file's path (``elsewhere/x``, ``log/sub/x``, no
directory member of its own): refused before anything is trusted, as a
directory member of that name is (docs/operations.md#backup-and-restore:
"a directory other than log/, snapshots/ and history/"). It was unpacked,
its directory made on the way."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from tests.cli.test_backup_stream import _member, _members, _real_backup, _refused, _with_extra


async def test_a_file_in_a_directory_a_backup_does_not_have_is_refused(
    spawn_server: Any, tmp_path: Path
) -> None:
    whole = await _real_backup(spawn_server)
    for number, name in enumerate(["elsewhere/x", "log/sub/x", "history/a/b/c"]):
        expected = f"{name!r} is in a directory a backup does not have"
        _refused(_with_extra(whole, _member(name), b"x"), tmp_path / f"d{number}", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "server0.log"]


async def test_a_file_in_place_of_a_layout_directory_is_refused(
    spawn_server: Any, tmp_path: Path
) -> None:
    """A regular file named ``log`` where the backup's log directory goes: a
    bad stream, not a local write failure ("cannot write the copy into
    DEST: Not a directory", as it was named when the next member came)."""
    whole = await _real_backup(spawn_server)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for member, content in _members(whole):
            if member.name == "log":
                member = tarfile.TarInfo("log")  # a regular file instead
                content = b"x"
                member.size = 1
            tar.addfile(member, io.BytesIO(content) if content is not None else None)
    expected = "'log' is a file where a backup has a directory"
    _refused(out.getvalue(), tmp_path / "d", expected)
