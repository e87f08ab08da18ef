"""The lifecycle of a FileStore: one phase, a table of the moves it may make, and
the facts that are not phases.

Theory of operation
-------------------
A store is always in exactly one :class:`Phase`:

- ``NEW``: made, not open (``lock()`` may hold the directory already; an
  ``open()`` that failed leaves the store here, to be opened again);
- ``OPEN``: recovered; takes appends while the log writes;
- ``RELOADING``: ``reload()`` re-reads the durable state for the caller: appends
  are refused meanwhile ("re-reading its state"), then it is ``OPEN`` again;
- ``CLOSING``: ``close()`` drains the queue and stops background work; appends
  are refused ("shutting down");
- ``CLOSED``: closed, the directory released; a store is opened once.

``TRANSITIONS`` is every move there is; :meth:`StoreState.to` refuses any other
(``IllegalTransition``), so a move the store did not plan for (a second
``open()``, two reloads at once) is a loud bug, not a combination of booleans.

Three facts are not phases, because each holds in several phases at once:

- ``failure``: the log's write or fsync failed and it refuses writes until a
  probe repairs it (the error, or None while the log writes). It holds in
  ``OPEN``, in ``RELOADING`` (a reload reads the disk while the disk refuses
  writes, and a probe may repair the log under it) and in ``CLOSING`` (a batch
  that ``close()`` drains can fail; the final fsync is then skipped). As a
  phase it would need a failed twin of each of these three.
- ``suspect``: an append whose records the caller may already have applied
  failed, so the caller's memory may be ahead of the disk; no snapshot is
  taken of it until ``reload()``. It is about the caller's memory, not the
  log: a record over the size limit makes memory suspect while the log writes
  on, and a probe that repairs the log leaves memory suspect.
- ``told``: ``on_failure`` was called in this episode, so it is not called
  again until a probe ends the failure or a reload ends the suspicion. Told
  implies suspect (both are set by the same refusal, cleared by the same
  reload; a probe clears only ``told``).

The store is ready (takes appends) when it is ``OPEN``, its log has no failure
and its history takes writes (that last one is the history's own fact: a
failed history write switches it off until the store's prober, once the disk
takes a probe write, reads it back from the log: ``history.reopen``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final


class Phase(enum.IntEnum):
    # An IntEnum in this order: "closing or closed" is one comparison.
    NEW = 1
    OPEN = 2
    RELOADING = 3
    CLOSING = 4
    CLOSED = 5


# Module constants for the per-append checks (a global, not an enum attribute lookup).
NEW: Final = Phase.NEW
OPEN: Final = Phase.OPEN
RELOADING: Final = Phase.RELOADING
CLOSING: Final = Phase.CLOSING
CLOSED: Final = Phase.CLOSED


TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = {
    # Recovered; closed without ever opening (or after an open that failed).
    Phase.NEW: frozenset({Phase.OPEN, Phase.CLOSED}),
    # reload() starts; close() starts.
    Phase.OPEN: frozenset({Phase.RELOADING, Phase.CLOSING}),
    # The re-read ended (read or not); close() started under it.
    Phase.RELOADING: frozenset({Phase.OPEN, Phase.CLOSING}),
    Phase.CLOSING: frozenset({Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}
"""Phase -> the phases it may move to."""


class IllegalTransition(RuntimeError):
    """The store tried a move the table does not have (a bug, or a misuse such
    as opening a store twice)."""


class StoreState:
    """One store's phase and the facts beside it (see the module docstring)."""

    __slots__ = ("failure", "phase", "suspect", "told")

    def __init__(self) -> None:
        self.phase = Phase.NEW
        self.failure: BaseException | None = None
        """The log's failure while it refuses writes (the latest probe's error)."""
        self.suspect = False
        """The caller's memory may hold records that are not durable."""
        self.told = False
        """``on_failure`` was called in this episode."""

    def to(self, phase: Phase) -> None:
        if phase not in TRANSITIONS[self.phase]:
            raise IllegalTransition(f"{self.phase.name} -> {phase.name}")
        self.phase = phase

    @property
    def running(self) -> bool:
        """Opened and not closing: reads, reloads, backups and snapshots may run."""
        return self.phase is OPEN or self.phase is RELOADING

    @property
    def closing(self) -> bool:
        """``close()`` has started (or finished): background work stops."""
        return self.phase >= CLOSING
