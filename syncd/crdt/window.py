"""A revert's window: the ops it looks at, each decoded only when read.

Theory of operation
-------------------
A revert (syncd/revert.py) hands a type's ``revert_ops`` every op of the
CRDT's life from some seq up to now, each *marked* when it is to be taken
back. A long window is mostly others' ops, and decoding an op record costs
more than most types then do with it (a few microseconds each: tens of
milliseconds for a window of ten thousand). So the window keeps each op as
its store read it and decodes it on first use, and it knows two things
without decoding: whether the op is marked (the revert found the writer's
ops through the history index) and a *kind key* of its delta's op name
(:func:`text_key` of ``"insert"``, ``"delete"``, ...; 0 when not known). A
type that needs only some ops asks :meth:`Window.may_be` first and decodes
only those that may be of the kind it needs; one that needs every op
iterates the window as the sequence of ``(delta, marked)`` steps it also is.

:meth:`Window.of` wraps steps already decoded (tests, and callers with the
deltas at hand), with their kinds taken from the deltas.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final, overload

from syncd.crdt.base import Step

KEY_BITS: Final = 30
"""A key fits in 30 bits, so two of them and two flags pack into one signed
64-bit integer (the history index keeps them so: syncd/store/history.py)."""

_KEY_MOD: Final = (1 << KEY_BITS) - 1

OP_KEYS_CACHED: Final = 256
"""Op names whose keys :func:`kind_of` keeps: every type's op names, many
times over; a replayed record's unknown name only takes a slot."""


def text_key(text: str) -> int:
    """A short string (an op name, an origin) as a key from 1 to 2**30 - 1:
    the same in every process (CRC-32, not ``hash``), never 0 (which means
    "none" or "not known"). Different strings may share a key: a key only
    ever says that a string *may* be the one asked for."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % _KEY_MOD + 1


_op_key: Final = lru_cache(maxsize=OP_KEYS_CACHED)(text_key)
""":func:`text_key` of op names, which are few and come back with every op:
a cache hit costs a third of the CRC (the history keys every record)."""


def kind_of(delta: Any) -> int:
    """The kind key of a delta (its ``op`` field), 0 when it has none."""
    # A dict, as every delta is, without the ABC check of isinstance(Mapping).
    if type(delta) is dict or isinstance(delta, Mapping):
        name = delta.get("op")
        return _op_key(name) if type(name) is str else 0
    return 0


class BaseNeeded(Exception):
    """Raised by a type's ``revert_ops`` given no base (its ``REVERT_BASE``
    False: it reads the base only in rare cases) when this revert needs it:
    the caller reads the base and asks again."""


class Window(Sequence[Step]):
    """The window's ops in seq order: ``(delta, marked)`` steps, each delta
    decoded by ``load(i)`` the first time it is read."""

    __slots__ = ("_deltas", "_encodings", "_load", "kinds", "marked")

    def __init__(
        self,
        marked: Sequence[bool],
        kinds: Sequence[int],
        load: Callable[[int], Mapping[str, Any]],
        encodings: Callable[[], Sequence[bytes] | None] | None = None,
    ) -> None:
        if len(marked) != len(kinds):
            raise ValueError("a window needs one mark and one kind per op")
        self.marked = marked
        """Whether each op is to be taken back."""
        self.kinds = kinds
        """Each op's kind key (:func:`text_key` of its delta's op name; 0: not known)."""
        self._load = load
        self._encodings = encodings
        self._deltas: list[Mapping[str, Any] | None] = [None] * len(marked)

    @classmethod
    def of(cls, steps: Iterable[Step]) -> Window:
        """A window of steps already decoded (or ``steps`` itself, when it is one)."""
        if isinstance(steps, Window):
            return steps
        held = list(steps)
        deltas = [delta for delta, _ in held]
        window = cls(
            [marked for _, marked in held], [kind_of(d) for d in deltas], deltas.__getitem__
        )
        window._deltas = list(deltas)
        return window

    def delta(self, i: int) -> Mapping[str, Any]:
        """Op ``i``'s delta (decoded now if it was not yet)."""
        delta = self._deltas[i]
        if delta is None:
            delta = self._deltas[i] = self._load(i)
        return delta

    def encodings(self) -> Sequence[bytes] | None:
        """Every op's whole record as its store keeps it (msgpack), in order,
        when it has them so; None otherwise (read :meth:`delta`). For a
        type that needs one field of every op and can find it in the
        encoding for less than a decode costs."""
        return None if self._encodings is None else self._encodings()

    def may_be(self, i: int, op: str) -> bool:
        """Whether op ``i``'s delta may be a ``op`` (False only when its kind
        says for sure that it is not)."""
        kind = self.kinds[i]
        return kind == 0 or kind == text_key(op)

    def __len__(self) -> int:
        return len(self.marked)

    @overload
    def __getitem__(self, index: int) -> Step: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Step]: ...

    def __getitem__(self, index: int | slice) -> Step | Sequence[Step]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("window index out of range")
        return self.delta(index), self.marked[index]

    def __iter__(self) -> Iterator[Step]:
        delta, marked = self.delta, self.marked
        return ((delta(i), marked[i]) for i in range(len(marked)))
