"""Small file helpers shared by layers that may not import each other
(auth's admin token and revocations files, the store's hint file)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or directory, not a file."""


def open_regular(path: Path, *, follow_links: bool = True) -> int:
    """A read-only descriptor of ``path`` once it is known to be a regular
    file. Opened without blocking: a FIFO in its place would otherwise hold
    the open (and the start that reads it) until some writer came, and the
    process would not even take a SIGTERM. Raises ``FileNotFoundError`` as
    ``os.open`` does, :class:`NotRegularFile` for anything but a file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_links:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{path} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of regular file ``path`` (at most ``limit`` + 1 when given,
    so a caller can tell "too large"); see :func:`open_regular`."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read() if limit is None else f.read(limit + 1)


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` whole or not at all, durably: write a
    temporary file beside it, fsync it, rename it over ``path``, fsync the
    directory (the rename is only durable once the directory is)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
