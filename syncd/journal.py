"""Lines on stderr that the systemd journal files at their own priority.

Under systemd, a service's stderr is a stream to journald, which files every
line at the unit's default priority (info) unless the line starts with a
syslog priority, ``<3>`` for an error (``SyslogLevelPrefix=``, on by default).
Without it a refused start, a failing disk and every traceback were info:
``journalctl -u syncd -p warning`` showed none of them, nor did an alert on the
journal's priorities. systemd names the stream in ``JOURNAL_STREAM``
(``device:inode``), so the prefix is written only when stderr is that stream,
not when it is a terminal, a file or a pipe (or the stream was passed on to
something started from the service).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Final

PRIORITIES: Final = (
    (logging.CRITICAL, 2),
    (logging.ERROR, 3),
    (logging.WARNING, 4),
    (logging.INFO, 6),
)
"""(least logging level, syslog priority), highest first; below INFO: 7 (debug)."""

ERROR_PREFIX: Final = "<3>"

JOURNAL_FORMAT: Final = "%(levelname)s %(name)s: %(message)s"
"""The log format for the journal: it stamps each line itself."""


def stderr_is_journal(env: Mapping[str, str] | None = None) -> bool:
    """Whether stderr is the journal stream ``JOURNAL_STREAM`` names."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    device, sep, inode = value.partition(":")
    if not (sep and device.isdigit() and inode.isdigit()):
        return False
    try:
        stat = os.fstat(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # no stderr, or not a real file
        return False
    return stat.st_dev == int(device) and stat.st_ino == int(inode)


def priority(levelno: int) -> int:
    """The syslog priority of a logging level."""
    for least, value in PRIORITIES:
        if levelno >= least:
            return value
    return 7


class JournalFormatter(logging.Formatter):
    """Each line of a record (a traceback's too) prefixed with its priority."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def refuse(prog: str, message: str) -> int:
    """Print ``prog: message`` as one line on stderr (an error to the journal,
    under systemd); the exit status of a refusal (2). The CLI's commands and
    the server's start (refusals found once the store is open) share it."""
    prefix = ERROR_PREFIX if stderr_is_journal() else ""
    print(f"{prefix}{prog}: {message}", file=sys.stderr)
    return 2
