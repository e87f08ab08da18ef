"""A history switched off by a failed write is read back from the log by the
store's prober, every ``probe_interval`` (test_history_write_failure.py). When
that re-read fails for a reason other than an I/O error (here: the log no
longer reads as far as the store wrote it), it logged a full stack trace at
every probe: a page of log per second for as long as it lasted. Now the first
failure logs its traceback and each repeat one line."""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from syncd.store.embedded.store import FileStore
from tests.store.embedded.test_failures import small_tmpfs, wait_until
from tests.store.embedded.test_full_disk import fill
from tests.store.embedded.test_hint import Writer
from tests.store.embedded.test_history_write_failure import (
    OPTIONS,
    write,
    write_until_the_history_fails,
)

REREAD = "re-reading the history failed"


def _damage_log_tail(data: Path) -> None:
    """Flip a byte near the end of the newest log segment (its last record)."""
    log_dir = data / "log"
    newest = max((p for p in log_dir.iterdir() if p.is_file()), key=lambda p: p.name)
    # The segment is written ahead (a runway of zeros): the last record ends
    # at the last non-zero byte.
    raw = newest.read_bytes()
    end = len(raw.rstrip(b"\0"))
    assert end > 0
    with open(newest, "r+b") as f:
        f.seek(end - 2)
        f.write(bytes([raw[end - 2] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


async def test_a_re_read_that_keeps_failing_logs_one_line_per_probe(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd.store")
    with small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        data = mnt / "data"
        store = FileStore(data, **OPTIONS)
        await store.open()
        acked: Counter[str] = Counter()
        try:
            writer = Writer(store)
            for i in range(40):
                await write(writer, acked, i)
            filler = mnt / "filler"
            fill(filler)
            await write_until_the_history_fails(store, writer, acked)
            _damage_log_tail(data)
            filler.unlink()  # the probes succeed: each tries the re-read

            def failed() -> list[logging.LogRecord]:
                return [r for r in caplog.records if r.getMessage().startswith(REREAD)]

            await wait_until(lambda: len(failed()) >= 5)
            assert not store.ready
            records = failed()
            assert records[0].exc_info is not None  # the first: why, in full
            for record in records[1:]:
                assert record.exc_info is None, record.getMessage()
                assert "\n" not in record.getMessage()
                assert "(StoreCorruptError: " in record.getMessage()  # still says why
        finally:
            await store.close()
