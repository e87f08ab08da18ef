"""systemd's notify protocol, written directly (one datagram per state change).

``READY=1`` once the socket is bound and storage recovered, ``WATCHDOG=1`` at
half of ``WATCHDOG_USEC`` while the loop is alive, ``STOPPING=1`` on shutdown,
``RELOADING=1`` then ``READY=1`` around a SIGHUP's reload. ``EXTEND_TIMEOUT_USEC``
asks for more than ``TimeoutStartSec``/``TimeoutStopSec`` while a start-up
recovery or a store's flush at the stop is still making progress
(:class:`Progress`), and for the whole of a stop's planned waits: a post-crash
start on a large data directory was killed at TimeoutStartSec and restarted
for ever, a long drain was SIGKILLed. Without ``NOTIFY_SOCKET`` every call is
a no-op.

A datagram is sent without waiting: when the receiver does not read (a
manager that is busy or stuck, a socket nobody serves), the notification is
dropped with a warning rather than blocking the event loop, and with it
every connection and the stop on SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Final

log = logging.getLogger("syncd.sdnotify")

MIN_WATCHDOG_INTERVAL_S: Final = 0.05
"""The shortest time between two ``WATCHDOG=1``: half of a tiny
``WATCHDOG_USEC`` (1 is accepted by the parser) would have the loop do
nothing but ping."""


EXTEND_INTERVAL_S: Final = 10.0
"""How often the timeout is extended while work goes on (a recovery, a flush)."""

EXTEND_BY_S: Final = 3 * EXTEND_INTERVAL_S
"""What each extension asks for, from when it is sent: a few intervals, so a
late tick is no kill; once progress stops, systemd's timeout comes this long
after the last extension (never before TimeoutStartSec/TimeoutStopSec)."""

MIN_PROGRESS_CPU_SHARE: Final = 0.05
"""The share of an interval the process must have spent on the CPU (every
thread: the recovery runs in the store's I/O thread) to count as working, when
it read nothing: the loop's own wake-ups cost far less."""

PROC_IO: Final = "/proc/self/io"
"""Linux's count of the bytes this process has read (rchar), from files and
sockets. Not what it wrote (wchar): its own notifications and log lines
would count as progress."""


PROC_IO_MAX_BYTES: Final = 4096


def _bytes_read() -> tuple[int, int]:
    """Bytes read by this process so far, and the bytes of this read of
    :data:`PROC_IO`, which the next one counts; (0, 0) where not counted."""
    try:
        fd = os.open(PROC_IO, os.O_RDONLY | os.O_CLOEXEC)
        try:
            text = os.read(fd, PROC_IO_MAX_BYTES)
        finally:
            os.close(fd)
    except OSError:
        return 0, 0
    for line in text.splitlines():
        name, _, value = line.partition(b":")
        if name == b"rchar" and value.strip().isdigit():
            return int(value), len(text)
    return 0, 0


class Progress:
    """Whether the process did some work since the last look: CPU time or
    bytes read. A recovery stuck on a disk that does not answer (a read in D
    state) or a wait on nothing does none, and is then no longer extended:
    systemd's timeout ends it as it would have."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._read = sum(_bytes_read())

    def advanced(self, interval: float) -> bool:
        cpu, (read, own) = time.process_time(), _bytes_read()
        worked = cpu - self._cpu >= MIN_PROGRESS_CPU_SHARE * interval or read > self._read
        self._cpu, self._read = cpu, read + own
        return worked


def _usec(seconds: float) -> int:
    return max(1, int(seconds * 1_000_000))


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET") or ""
        if address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace socket
        self._address = address or None
        self._watchdog_usec = 0
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if usec.isascii() and usec.isdigit() and (not pid or pid == str(os.getpid())):
            self._watchdog_usec = int(usec)
        self._task: asyncio.Task[None] | None = None
        self._extending: asyncio.Task[None] | None = None
        self._failing = False
        """The last datagram failed: the watchdog's next failures are not
        logged again until one gets through."""

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, state: str) -> bool:
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)  # a full queue is EAGAIN, not a wait
                sock.connect(self._address)
                sock.send(state.encode("utf-8"))
        except OSError as exc:
            if not self._failing:
                log.warning("sd_notify to %r failed: %s", self._address, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("sd_notify to %r works again", self._address)
        self._failing = False
        return True

    def ready(self, status: str = "") -> None:
        self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def stopping(self, planned_s: float = 0.0) -> None:
        """``STOPPING=1``; with ``planned_s``, the timeout extended by that much
        (what the stop may wait by its settings)."""
        extend = f"\nEXTEND_TIMEOUT_USEC={_usec(planned_s)}" if planned_s > 0 else ""
        self.notify("STOPPING=1" + extend)

    def reloading(self) -> None:
        """``RELOADING=1`` with ``MONOTONIC_USEC`` (what Type=notify-reload
        needs to match it to its SIGHUP); ``ready()`` when the reload is done."""
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify(f"RELOADING=1\nMONOTONIC_USEC={now}")

    def extend_timeout(self, seconds: float, status: str = "") -> None:
        self.notify(
            f"EXTEND_TIMEOUT_USEC={_usec(seconds)}" + (f"\nSTATUS={status}" if status else "")
        )

    def start_extending(self, status: str, planned_s: float = 0.0) -> None:
        """Extend the current timeout (start or stop) now, by ``planned_s``
        (what the work may take by its settings) or :data:`EXTEND_BY_S`,
        whichever is longer, and by :data:`EXTEND_BY_S` again every
        :data:`EXTEND_INTERVAL_S` while the process makes :class:`Progress`
        (never to less than the planned time), until :meth:`stop_extending`.
        Each extension counts from when it is sent: one never shortens the
        time an earlier one gave."""
        if self._address is None or self._extending is not None:
            return
        loop = asyncio.get_running_loop()
        first = max(planned_s, EXTEND_BY_S)
        self.extend_timeout(first, status)
        self._extending = loop.create_task(self._extend(status, loop.time() + first))

    async def _extend(self, status: str, planned_until: float) -> None:
        loop = asyncio.get_running_loop()
        progress = Progress()
        stalled = False
        while True:
            interval = EXTEND_INTERVAL_S
            await asyncio.sleep(interval)
            if progress.advanced(interval):
                if stalled:
                    log.info("%s: progressing again; systemd's timeout is extended again", status)
                stalled = False
                self.extend_timeout(max(EXTEND_BY_S, planned_until - loop.time()), status)
            elif not stalled:
                stalled = True
                log.warning(
                    "%s: no progress in %g s; systemd's timeout is no longer extended",
                    status,
                    interval,
                )

    def stop_extending(self) -> None:
        if self._extending is not None:
            self._extending.cancel()
            self._extending = None

    def start_watchdog(self) -> None:
        if self._address is None or self._watchdog_usec <= 0 or self._task is not None:
            return
        interval = max(self._watchdog_usec / 1_000_000 / 2, MIN_WATCHDOG_INTERVAL_S)
        self._task = asyncio.get_running_loop().create_task(self._watchdog(interval))

    async def _watchdog(self, interval: float) -> None:
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    def stop_watchdog(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
