"""One encoding of a CRDT's whole state, shared by every peer that joins it.

Theory of operation
-------------------
A peer that joins a CRDT with nothing (a fresh Yjs provider's empty state
vector, a native subscription or an SSE stream without ``since``) is sent the
whole state. Encoded per peer, N peers joining a 4 MB document at once held N
copies of it, one in each transport's buffer. Here the encoding is made once
per version of the CRDT and the same object is written to every peer
(:mod:`syncd.http.feed` slices it as each transport drains; a slice is a view,
never a copy).

:class:`SharedStates` is one protocol's cache of them (a Yjs endpoint's
whole-document updates, the native WebSocket's snapshot frames, SSE's snapshot
events), keyed by the CRDT and the form. An entry holds its encoding weakly: it
lives while some transport or feed still holds a view of it, and goes with the
last, so nothing is kept for a CRDT nobody is joining; and for
:data:`SHARE_LINGER_S` after it was made or last taken as the current
version, since the joiners of a storm arrive over a while and a peer whose
socket takes the whole state at once (the kernel holds it then) lets go of
its view at once. An entry is for one
version: the engine's entry (the same object, so a CRDT dropped and read back
is never confused with the one before), its epoch and its seq (every change of
a life's state is an op with the next seq). :meth:`SharedStates.exact` answers
only for the current version; :meth:`SharedStates.recent` may answer with one
up to ``max_lag`` ops older, for a type whose peers can take the rest as a
catch-up (Yjs: a diff by the state vector kept with the encoding).

A state smaller than :data:`SHARE_MIN_BYTES` is not kept: encoding it per peer
is cheap, and a peer's own small copy is what it was before.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from syncd.crdt.engine import Entry

SHARE_MIN_BYTES: Final = 64 * 1024
"""A state at least this large is encoded once and shared (the feed's slice:
smaller ones go out whole in one write anyway, and encoding them per peer costs
less than a cache entry)."""

SHARE_LINGER_S: Final = 1.0
"""How long a shared encoding is kept after it was made or last taken, even
when no socket holds it: long enough for the joiners of a storm, who arrive
over hundreds of milliseconds, to share one; short enough that a document
nobody joins any more is not held for long."""

Key = tuple[str, str, str]


class SharedState(bytearray):
    """An encoded state (never changed once made) that can be referred to weakly.

    A bytearray, not bytes: bytes cannot be weakly referenced. Views of it
    (``memoryview``) keep it alive for as long as any transport holds one."""

    __slots__ = ("__weakref__",)


@dataclass(slots=True)
class _Cached:
    entry: Entry
    """The engine's entry it was made from (held: identity is the check)."""
    epoch: str
    seq: int
    ref: weakref.ref[SharedState]
    extra: bytes
    """What the maker kept with it (Yjs: the state vector it covers)."""
    held: SharedState | None
    """The encoding, held while it lingers (then only views keep it)."""
    until: float
    """When it stops lingering (the loop's clock), unless taken again."""


class SharedStates:
    """One protocol's shared encodings (see the module docstring)."""

    __slots__ = ("_cached", "_linger_s", "_min_bytes")

    def __init__(self, min_bytes: int = SHARE_MIN_BYTES, linger_s: float = SHARE_LINGER_S) -> None:
        self._cached: dict[Key, _Cached] = {}
        self._min_bytes = min_bytes
        self._linger_s = linger_s

    def __len__(self) -> int:
        return len(self._cached)

    def exact(self, entry: Entry, form: str, build: Callable[[], bytes]) -> bytes | SharedState:
        """``form`` of ``entry``'s current state: the shared encoding when one
        is alive, else ``build()`` (kept and shared when it is large)."""
        hit = self.recent(entry, form, 0)
        if hit is not None:
            return hit[0]
        return self.keep(entry, form, build())

    def recent(
        self, entry: Entry, form: str, max_lag: int
    ) -> tuple[SharedState, int, bytes] | None:
        """A live shared encoding of ``entry`` in ``form`` at most ``max_lag``
        ops behind its current state: ``(encoding, its seq, its extra)``."""
        key = (entry.ns, entry.id, form)
        cached = self._cached.get(key)
        if cached is None:
            return None
        if (
            cached.entry is not entry
            or cached.epoch != entry.epoch
            or not 0 <= entry.seq - cached.seq <= max_lag
        ):
            return None
        state = cached.ref()
        if state is None:  # its last view went a moment ago; the callback comes
            return None
        if cached.seq == entry.seq:
            # Taken as the current version: it lingers on. One behind is not
            # kept on by being taken, so a fresh one is made within a linger.
            self._linger(cached, state)
        return state, cached.seq, cached.extra

    def keep(self, entry: Entry, form: str, data: bytes, extra: bytes = b"") -> bytes | SharedState:
        """``data``, ``form`` of ``entry``'s current state: as a
        :class:`SharedState` kept for the peers that join next when it is large
        (it replaces the one before), else as it is."""
        if len(data) < self._min_bytes:
            return data
        state = SharedState(data)
        key = (entry.ns, entry.id, form)
        cached = _Cached(
            entry, entry.epoch, entry.seq, weakref.ref(state, self._gone(key)), extra, None, 0.0
        )
        self._cached[key] = cached
        self._linger(cached, state)
        return state

    def _linger(self, cached: _Cached, state: SharedState) -> None:
        """Hold ``state`` for the linger from now (a timer lets it go)."""
        loop = asyncio.get_running_loop()
        cached.until = loop.time() + self._linger_s
        if cached.held is None:
            cached.held = state
            loop.call_at(cached.until, self._let_go, cached)

    def _let_go(self, cached: _Cached) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < cached.until:  # taken again meanwhile: linger on
            loop.call_at(cached.until, self._let_go, cached)
        else:
            cached.held = None  # the views keep it now, if any; the last drops the entry

    def _gone(self, key: Key) -> Callable[[weakref.ref[SharedState]], None]:
        cached = self._cached

        def gone(ref: weakref.ref[SharedState]) -> None:
            held = cached.get(key)
            if held is not None and held.ref is ref:
                del cached[key]

        return gone
