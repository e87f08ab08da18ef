"""The lifecycle of one HTTP connection: one phase, and a table of the moves it may make.

Theory of operation
-------------------
A connection is always in exactly one :class:`Phase`:

- ``IDLE``: waiting for a request, or reading one (the parser holds its bytes);
- ``BUSY``: a handler is working on a request; pipelined bytes wait;
- ``STREAMING``: a stream response (SSE) owns the connection until either side ends it;
- ``LINGERING``: the last answer is written and our side half-closed; what the
  peer still sends is discarded until its EOF or a time bound (quiet too long,
  or lingering too long in all);
- ``UPGRADED``: the transport was handed to another protocol (WebSocket);
  this one is done with it;
- ``CLOSED``: closed or lost.

``TRANSITIONS`` is every move there is; :meth:`ConnectionState.to` refuses any
other, so a move the protocol code did not plan for is a loud bug, not a
silent combination of flags. Flow control (reading or writing paused), the
peer's EOF and the count of refused connections lingering are not phases:
they can hold in several phases at once and stay flags of the protocol.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final


class Phase(enum.IntEnum):
    # An IntEnum: hashed and compared in C, since the checks run per request.
    IDLE = 1
    BUSY = 2
    STREAMING = 3
    LINGERING = 4
    UPGRADED = 5
    CLOSED = 6


# Module constants for the per-request checks (a global, not an enum attribute lookup).
IDLE: Final = Phase.IDLE
BUSY: Final = Phase.BUSY
STREAMING: Final = Phase.STREAMING
LINGERING: Final = Phase.LINGERING
UPGRADED: Final = Phase.UPGRADED
CLOSED: Final = Phase.CLOSED


TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = {
    # A request arrives; a parse error or a refusal at accept is answered and
    # the connection lingers; the peer goes away.
    Phase.IDLE: frozenset({Phase.BUSY, Phase.LINGERING, Phase.CLOSED}),
    # Answered and kept alive; answered with a stream; switched protocols;
    # answered with "Connection: close"; the peer went away meanwhile.
    Phase.BUSY: frozenset(
        {Phase.IDLE, Phase.STREAMING, Phase.UPGRADED, Phase.LINGERING, Phase.CLOSED}
    ),
    Phase.STREAMING: frozenset({Phase.CLOSED}),
    Phase.LINGERING: frozenset({Phase.CLOSED}),
    Phase.UPGRADED: frozenset(),
    Phase.CLOSED: frozenset(),
}
"""Phase -> the phases it may move to."""

_ALLOWED: Final = (frozenset(), *(TRANSITIONS[Phase(i)] for i in range(1, len(Phase) + 1)))
"""``TRANSITIONS`` indexed by the phase's number: the check costs a tuple index."""


class IllegalTransition(RuntimeError):
    """The protocol tried a move the table does not have (a bug)."""


class ConnectionState:
    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = Phase.IDLE

    def to(self, phase: Phase) -> None:
        if phase not in _ALLOWED[self.phase]:
            raise IllegalTransition(f"{self.phase.name} -> {phase.name}")
        self.phase = phase

    @property
    def done(self) -> bool:
        """Closed, or no longer ours (upgraded): nothing more happens here."""
        return self.phase >= UPGRADED
