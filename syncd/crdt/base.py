"""The one small protocol every CRDT type implements.

Theory of operation
-------------------
A CRDT object lives in memory inside the engine. A client op (a JSON map such
as ``{"op": "add", "element": 3}``) goes through :meth:`Crdt.apply_op`, which
validates it completely *before* mutating anything (so a refused op leaves the
state untouched), applies it, and returns the *delta op*: the op as applied,
carrying everything another replica needs to apply it without further context
(dots, element ids, timestamps). Replicas (other nodes, client-side replicas,
crash recovery) feed delta ops to :meth:`Crdt.apply_delta`, which is idempotent.

``state()`` is the full mergeable state as plain data that both JSON and msgpack
can carry (maps keyed by strings, lists, ints, strings, bools, None, floats).
``from_state(state())`` round-trips; ``merge`` joins two states (commutative,
associative, idempotent).

All mutation of a CRDT goes through these methods; the engine never reaches
into a type's internals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol, Self

JSON = Any
"""Plain data that JSON and msgpack both carry."""

Step = tuple[Mapping[str, Any], bool]
"""One op of a revert's window: its delta, and whether it is to be taken back."""


class Base:
    """The state right before a revert's window, as the store holds it: a
    checkpoint's state (None: the empty state before the first op) and the
    deltas after it, ascending. :meth:`crdt` builds it, once; a type that
    needs only part of it may read ``state`` and ``deltas`` instead (an rga
    looks up a few values without building a sequence of every element)."""

    __slots__ = ("_built", "cls", "deltas", "state")

    def __init__(
        self, cls: type[Crdt], state: JSON | None, deltas: Sequence[Mapping[str, Any]]
    ) -> None:
        self.cls = cls
        self.state = state
        self.deltas = deltas
        self._built: Crdt | None = None

    def crdt(self) -> Crdt:
        """The state as a CRDT object, shared by every caller: clone it to change it."""
        if self._built is None:
            crdt = self.cls.new() if self.state is None else self.cls.from_state(self.state)
            for delta in self.deltas:
                crdt.apply_delta(delta)
            self._built = crdt
        return self._built


class OpContext(NamedTuple):
    """What the engine knows about an op that the op itself does not say.

    Made once per op: a NamedTuple is immutable, as a frozen dataclass is,
    and costs half as much to make (a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``: 0.47 us against 0.24 us)."""

    client_id: int
    """The writer: always the token's client id."""
    now_ms: int
    """The server's hybrid-clock time in ms, monotonic per engine."""
    seq: int
    """The seq this op will get on its CRDT."""


class Crdt(Protocol):
    TYPE: ClassVar[str]
    """The type name, e.g. ``"gcounter"``."""
    OPS: ClassVar[Mapping[str, int]]
    """Op name -> op-mask bit (docs/data-model.md#types)."""
    PREFIX: ClassVar[str]
    """The id prefix that fixes this type, e.g. ``"gc:"`` (three characters)."""
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None]
    """The op a WebSocket connection sends on its own behalf when it goes away,
    to every CRDT of this type it wrote with another op (presence: ``leave``);
    None for types that keep no per-connection state."""

    RESTORABLE: ClassVar[bool]
    """Whether :meth:`restore_ops` can take this type back to an earlier state."""

    REVERTIBLE: ClassVar[bool]
    """Whether :meth:`revert_ops` can take back one writer's ops."""

    REVERT_BASE: ClassVar[bool]
    """Whether :meth:`revert_ops` reads the base (the caller reads it first)."""

    @classmethod
    def new(cls) -> Self: ...

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """Client ops (as :meth:`apply_op` takes them) that take back the
        effects of the *marked* ops of ``window`` that are still in effect in
        this state, and leave every other op's (docs/revert.md: each type's
        rule); ``[]`` when nothing is in effect. ``window`` is every op of
        this life from some seq up to this state, in seq order, each a delta
        and whether it is to be taken back (from a revert, a
        :class:`syncd.crdt.window.Window`, which decodes a delta when it is
        read: a type that reads few of them asks it which may matter, and
        ``Window.of`` makes one of plain steps); ``base`` is the state right
        before the window's first op, given when ``REVERT_BASE`` says the
        type reads it (ValueError when it is missing then). Raises
        ``ApiError`` 409 ``not_revertible`` for a type that cannot
        (``REVERTIBLE`` False). It never changes this state or ``base``."""
        ...

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        """Client ops (as :meth:`apply_op` takes them) that, applied in order to
        this state, make its read value equal ``target``'s: an earlier state of
        this same CRDT, whose history this one contains. ``[]`` when equal.
        Raises ``ApiError`` 409 ``not_restorable`` for a type that cannot go
        back (``RESTORABLE`` False). It never changes this state."""
        ...

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        """Validate ``op`` (raising :class:`syncd.errors.ApiError`, state untouched), apply it, return the delta op."""
        ...

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        """Apply a delta op made by :meth:`apply_op` on any replica. Idempotent."""
        ...

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        """Extra fields for the client's answer to the op that made ``delta``
        (an rga insert answers ``{"ids": [...]}``); ``{}`` for most ops."""
        ...

    def view(self, now_ms: int) -> dict[str, Any]:
        """The read view: ``{"value": ..., <per-type extra fields>}`` (docs/data-model.md#reading)."""
        ...

    def state(self) -> JSON:
        """The full mergeable state (``?format=crdt``, snapshots)."""
        ...

    @classmethod
    def from_state(cls, state: JSON) -> Self: ...

    def merge(self, other: Self) -> None:
        """Join ``other``'s state into this one."""
        ...

    def clone(self) -> Self:
        """An independent copy (batches are applied to a clone, all or none)."""
        ...
