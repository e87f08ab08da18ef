"""systemd's notify protocol, written directly (one datagram per state change).

``READY=1`` once the socket is bound and storage recovered, ``WATCHDOG=1`` at
half of ``WATCHDOG_USEC`` while the loop is alive, ``STOPPING=1`` on shutdown.
Without ``NOTIFY_SOCKET`` every call is a no-op.

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
from collections.abc import Mapping
from typing import Final

log = logging.getLogger("syncd.sdnotify")

MIN_WATCHDOG_INTERVAL_S: Final = 0.05
"""The shortest time between two ``WATCHDOG=1``: half of a tiny
``WATCHDOG_USEC`` (1 is accepted by the parser) would have the loop do
nothing but ping."""


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

    def stopping(self) -> None:
        self.notify("STOPPING=1")

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
