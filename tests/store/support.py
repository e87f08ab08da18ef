"""Helpers shared by the store tests: records, a fault-injecting file layer, and
a real server on it whose writes a test can hold (``gated_server``)."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from syncd.app import App
from syncd.server import Server
from syncd.store.base import Record
from syncd.store.embedded.log import LogFile, Opener
from tests.conftest import RunningServer, base_settings


def op(seq: int, crdt: str = "gc:a", ns: str = "n", epoch: str = "e1", **extra: Any) -> Record:
    """An op record shaped like the engine's."""
    record: Record = {
        "kind": "op",
        "ns": ns,
        "id": crdt,
        "type": "gcounter",
        "seq": seq,
        "epoch": epoch,
        "client_id": 7,
        "ts": 1_700_000_000_000 + seq,
        "op": {"op": "increment", "amount": seq},
        "op_id": None,
    }
    record.update(extra)
    return record


def deleted(crdt: str = "gc:a", ns: str = "n") -> Record:
    return {"kind": "deleted", "ns": ns, "id": crdt}


def seqs(records: list[Record]) -> list[int]:
    return [r["seq"] for r in records]


class Faults:
    """Switches shared by every file a faulty opener makes. Set an errno to make
    that call raise it; ``gate`` blocks writes until set (to hold a batch in flight)."""

    def __init__(self) -> None:
        self.write_errno: int | None = None
        self.fsync_errno: int | None = None
        self.open_errno: int | None = None
        self.truncate_errno: int | None = None
        self.partial = True
        """A failing write first writes half its bytes, as a full disk does."""
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.writes = 0

    def clear(self) -> None:
        self.write_errno = self.fsync_errno = self.open_errno = self.truncate_errno = None


class FaultyFile(LogFile):
    faults: Faults

    def write_at(self, data: bytes | memoryview, offset: int) -> None:
        faults = self.faults
        faults.writes += 1
        faults.entered.set()
        if faults.gate is not None:
            faults.gate.wait(10)
        code = faults.write_errno
        if code is not None:
            if faults.partial:
                super().write_at(memoryview(data)[: len(data) // 2], offset)
            raise OSError(code, os.strerror(code), self.path)
        super().write_at(data, offset)

    def write_durable(self, data: bytes | memoryview, offset: int) -> None:
        self.write_at(data, offset)  # both fault points, in the order a kernel meets them
        self.fsync()

    def fsync(self) -> None:
        code = self.faults.fsync_errno
        if code is not None:
            raise OSError(code, os.strerror(code), self.path)
        super().fsync()

    def truncate(self, size: int) -> None:
        code = self.faults.truncate_errno
        if code is not None:
            raise OSError(code, os.strerror(code), self.path)
        super().truncate(size)


def faulty_opener(faults: Faults) -> Opener:
    def open_file(path: str) -> LogFile:
        if faults.open_errno is not None:
            raise OSError(faults.open_errno, os.strerror(faults.open_errno), path)
        f = FaultyFile(path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        f.faults = faults
        return f

    return open_file


ENOSPC, EIO, EACCES = errno.ENOSPC, errno.EIO, errno.EACCES


@contextlib.asynccontextmanager
async def gated_server(
    data_dir: Path, **settings: Any
) -> AsyncIterator[tuple[RunningServer, Faults]]:
    """A real server (``settings`` over the tests' base ones, fsync ``batch``) on
    an embedded store whose log writes wait on ``faults.gate`` once a test sets
    one, and fail with ``faults.write_errno``: an op stays in flight, or its
    write fails, when the test says."""
    faults = Faults()
    config = base_settings(data_dir, fsync="batch", **settings)
    app = App(config, store_options={"opener": faulty_opener(faults), "probe_interval": 0.02})
    server = Server(config, app)
    await server.start()
    try:
        yield RunningServer(server), faults
    finally:
        if faults.gate is not None:
            faults.gate.set()
        await server.shutdown()
