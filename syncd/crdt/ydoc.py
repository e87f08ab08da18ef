"""A Yjs document (``ydoc``, ids ``yd:…``), merged by Yrs through pycrdt.

Theory of operation
-------------------
The op is a Yjs update (v1 encoding), base64 in JSON: ``{"op": "update",
"update": "<base64>"}``. Yjs updates are themselves CRDT deltas: applying one
twice, or several in any order, gives the same document, so the delta op is
the update as received and :meth:`YDoc.apply_delta` is the same call. An
update whose dependencies have not arrived yet is held by Yrs as pending and
integrated when they do, exactly as in a browser (where Yrs alone would keep
one waiting, the type applies it again: :meth:`YDoc._retry`).

The read view is the whole document as one update plus its state vector
(what a Yjs client needs to load it, or to ask for only what it lacks),
the updates that wait merged into that update as into a replica's
(:meth:`YDoc.view`); :func:`root_view` gives a JSON view of one named root
type, of the integrated document. ``state()`` is the
merged document as one update, so snapshots hold the document, not the list
of updates that built it; beside it a snapshot keeps the updates still
waiting for their dependencies, each as it came (:meth:`YDoc.snapshot_state`:
Yrs leaves them out of the merged document), and they wait again once it is
read back. A replica (a subscription's snapshot, a ``?format=crdt`` read)
gets them merged into its update, as Yjs encodes a document for a peer, to
wait in its own copy, and listed beside it (:meth:`YDoc.replica_state`).

Refusing bad input without corrupting the document: an update must decode
(checked without touching the document) and be at most
:data:`MAX_UPDATE_BYTES`. A decodable update can still make Yrs panic while
integrating it (a forged reference, say), half-way through. So the type keeps
what it can rebuild from, the last full update plus the updates applied
since (bounded: folded into a new full update once they outweigh it), and
after a failed apply rebuilds the document from those, and refuses the op.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self, cast

from pycrdt import (
    Array,
    Doc,
    Map,
    Text,
    UndoManager,
    XmlElement,
    XmlFragment,
    XmlText,
    get_state,
    get_update,
    merge_updates,
)
from pycrdt._base import BaseType
from pycrdt._pycrdt import XmlText as _RawXmlText
from pycrdt._pycrdt import get_update as _raw_get_update
from pycrdt._transaction import hash_origin

from syncd.crdt import ydoc_nesting
from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.validate import check_fields, es_number, op_fields, op_name, required
from syncd.crdt.window import Window
from syncd.errors import ApiError, invalid_op, not_restorable

UPDATE_FIELDS = op_fields("update")
"""The fields of ``update`` (docs/yjs.md)."""

MAX_UPDATE_BYTES: Final = 4 * 1024 * 1024
"""One update, decoded. Over HTTP and WebSocket the body and message limits
(``SERVICE_MAX_BODY_BYTES``) usually refuse first; this bounds what any path
can hand to Yrs in one call."""

REBUILD_FLOOR_BYTES: Final = 64 * 1024
"""Updates kept since the last full update before they are folded into a new
one, at least; past that, at most as much as the full update itself, so the
rebuild data stays within about twice the document."""

EMPTY_UPDATE: Final = b"\x00\x00"
"""A Yjs update that carries nothing (what an up-to-date peer sends)."""

ROOT_KINDS: Final = ("text", "map", "array", "xml")

NESTING_THREAD_BYTES: Final = 64 * 1024
"""A document from this size has its type depths (:meth:`YDoc._check_nesting`)
read in a thread before its first write from a Yjs socket
(:meth:`YDoc.read_nesting`): the read walks every item of the document in
Python, about 1 s of CPU for a 4 MB document of 230,000 map entries, which
held the event loop (every connection) at the first write after a load.
Smaller documents are read at the write, a few milliseconds at most."""

_nesting_readers: list[ThreadPoolExecutor] = []
"""The one thread that reads documents' type depths, made when first needed:
the read is Python holding the GIL, so a second thread would only slow the
event loop further, and one read at a time bounds the updates held for it."""


def _nesting_reader() -> ThreadPoolExecutor:
    if not _nesting_readers:
        _nesting_readers.append(
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="syncd-ydoc-nesting")
        )
    return _nesting_readers[0]


def _read_depths(update: bytes, waiting: Sequence[bytes]) -> ydoc_nesting.TypeDepths:
    """The type depths of a document: its full update, then what waits."""
    depths = ydoc_nesting.TypeDepths()
    for each in (update, *waiting):
        depths.record(depths.deepest(each))
    return depths


DELETED_DOC_MEMORY_S: Final = 600.0
"""How long a node remembers a Yjs document it deleted (:class:`DeletedYDocs`):
an editor still open on it reconnects and sends its copy back within this,
to be refused instead of creating the document again. Ten minutes covers a
provider's reconnects many times over (Hocuspocus backs off to 30 s,
y-websocket to 2.5 s) and a network outage or a laptop lid of a few
minutes; an editor away for longer creates it again, as before."""

DELETED_DOCS_KEPT: Final = 10_000
"""Deleted documents a node remembers at most, the oldest forgotten first:
a bulk delete of a namespace does not grow memory without bound."""

DELETED_DOCS_BYTES: Final = 16 * 1024 * 1024
"""The bytes of state vectors a node remembers at most, the oldest
forgotten first: a state vector is about ten bytes per client that ever
wrote to the document, so one of a document of a million writers is ~10 MB."""


class DeletedYDocs:
    """Yjs documents this node deleted lately, each with its state vector at
    the deletion, to tell a stale editor's copy of one from a new document.

    A Yjs provider keeps its copy of a deleted document and sends all of it
    (its sync step 2, or an update) whenever it connects again; Hocuspocus's
    provider cannot be told to stop. Written, it creates the document again
    with the deleted content. While a document is remembered (up to
    ``memory_s``; ``kept`` and ``most_bytes`` bound how many), an update
    from a Yjs socket that would create it again is refused when it carries
    a client of the deleted document: an item below its clock there (content
    of the deleted document) or past it (that editor's later edits, made on
    top of the deleted content, which Yrs would hold pending for ever). An
    update with no items but a delete set deletes only what the document
    held, and is refused too. A fresh editor (a new Y.Doc: new client ids)
    creates the document as always, and so does any HTTP write, which is
    not asked. Per node and in memory: another node of a cluster, or this
    one after a restart, does not know of the deletion."""

    __slots__ = ("_bytes", "_docs", "_now", "kept", "memory_s", "most_bytes")

    def __init__(
        self,
        memory_s: float = DELETED_DOC_MEMORY_S,
        kept: int = DELETED_DOCS_KEPT,
        most_bytes: int = DELETED_DOCS_BYTES,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory_s = memory_s
        self.kept = kept
        self.most_bytes = most_bytes
        self._now = now
        self._docs: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()
        """(ns, id) -> (when it is forgotten, its state vector), oldest first."""
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._docs)

    def remember(self, ns: str, crdt_id: str, state_vector: bytes) -> None:
        """``ns``/``crdt_id`` was deleted at ``state_vector``."""
        self.forget(ns, crdt_id)
        docs = self._docs
        docs[(ns, crdt_id)] = (self._now() + self.memory_s, state_vector)
        self._bytes += len(state_vector)
        while docs and (len(docs) > self.kept or self._bytes > self.most_bytes):
            self._bytes -= len(docs.popitem(last=False)[1][1])
        self._expire()

    def forget(self, ns: str, crdt_id: str) -> None:
        held = self._docs.pop((ns, crdt_id), None)
        if held is not None:
            self._bytes -= len(held[1])

    def _expire(self) -> None:
        docs = self._docs
        now = self._now()
        while docs:
            key, (until, state_vector) = next(iter(docs.items()))
            if until > now:
                return
            del docs[key]
            self._bytes -= len(state_vector)

    def brings_back(self, ns: str, crdt_id: str, update: bytes) -> bool:
        """Whether ``update``, written to ``ns``/``crdt_id`` where it does not
        exist, would bring back a document deleted lately (see the class).
        False for an update that is not one, or too large or deep for Yrs to
        read safely: the write refuses it as usual."""
        if not self._docs:
            return False
        self._expire()
        held = self._docs.get((ns, crdt_id))
        if held is None or update == EMPTY_UPDATE:
            return False
        if len(update) > MAX_UPDATE_BYTES or ydoc_nesting.too_deep(update):
            return False
        try:
            writers = _clocks(get_state(update))
            deleted = _clocks(held[1])
        except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return False
        if not writers:
            return True  # a delete set alone: of the deleted document's items
        return any(client in deleted for client in writers)


def too_large(message: str) -> ApiError:
    return ApiError(413, "payload_too_large", message)


def decode_update(text: Any, field: str = "update") -> bytes:
    """The bytes of a base64 Yjs update, checked to decode as one; 400/413 otherwise."""
    if type(text) is not str:
        raise invalid_op(f"{field}: must be a base64 string (a Yjs update, v1 encoding)")
    if len(text) > (MAX_UPDATE_BYTES // 3 + 1) * 4:
        raise too_large(f"{field}: over {MAX_UPDATE_BYTES} bytes")
    try:
        update = binascii.a2b_base64(text, strict_mode=True)
    except ValueError:  # binascii.Error, or a str with a character past ASCII
        raise invalid_op(f"{field}: not valid base64") from None
    check_update(update, field)
    return update


def check_update(update: bytes, field: str = "update") -> None:
    if len(update) > MAX_UPDATE_BYTES:
        raise too_large(f"{field}: over {MAX_UPDATE_BYTES} bytes")
    check_decodes(update, field)


def check_decodes(update: bytes, field: str) -> None:
    if ydoc_nesting.too_deep(update):
        # Yrs would decode it by recursion past its stack: the process dies.
        raise invalid_op(
            f"{field}: holds a value (arrays and objects) nested deeper than "
            f"{ydoc_nesting.MAX_VALUE_DEPTH} levels"
        )
    try:
        get_state(update)  # decodes the whole update; the document is not touched
    except ValueError:
        raise invalid_op(f"{field}: not a Yjs update (v1 encoding)") from None


MAX_VAR_UINT_BYTES: Final = 8
"""A var-uint of a client id or a clock: 2**53 fits in eight bytes."""


def _var_uint(data: bytes, pos: int, most: int = MAX_VAR_UINT_BYTES) -> tuple[int, int]:
    """lib0's var-uint at ``pos`` and the position after it; IndexError or
    ValueError when there is none (or it is longer than ``most`` bytes)."""
    value = shift = 0
    for i in range(pos, pos + most):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise ValueError("var-uint too long")


def deletion_ranges(text: Any, state_vector: bytes, most: int) -> int | None:
    """How many ranges the update of an ``update`` op deletes, when it only
    deletes what a document with ``state_vector`` holds: no items the
    document lacks (less the state vector, its first var-uint, the clients
    with structs, is 0: an update that only brings again items the document
    has, as a provider re-sends what it loaded from its own storage, counts
    as its deletions) and every range of its delete set below the
    document's clock for that client (a range past it would wait in Yrs's
    pending delete set). None otherwise, for anything that does not read so,
    or past ``most`` ranges (the walk stops there)."""
    if type(text) is not str or len(text) > (MAX_UPDATE_BYTES // 3 + 1) * 4:
        return None
    try:
        update = binascii.a2b_base64(text, strict_mode=True)
        if ydoc_nesting.too_deep(update):
            return None  # Yrs would decode it past its stack (check_decodes)
        if update[:1] != b"\x00":
            update = _new_to(update, state_vector)
        if update[:1] != b"\x00":
            return None  # items the document lacks (or not an update)
        clocks = _clocks(state_vector, MAX_VAR_UINT_BYTES)
        return _ranges_below(update, clocks, most, MAX_VAR_UINT_BYTES)
    except (binascii.Error, IndexError, ValueError):
        return None


def _ranges_below(
    update: bytes, clocks: dict[int, int], most: int | None, var_uint_bytes: int
) -> int | None:
    """How many ranges the delete set of ``update`` (an update with no items:
    its delete set starts at byte 1) holds, when every one lies below
    ``clocks`` and there are at most ``most``; else None. IndexError or
    ValueError when it does not read so."""
    ranges = 0
    clients, pos = _var_uint(update, 1, var_uint_bytes)
    for _ in range(clients):
        client, pos = _var_uint(update, pos, var_uint_bytes)
        n, pos = _var_uint(update, pos, var_uint_bytes)
        ranges += n
        if most is not None and ranges > most:
            return None
        held = clocks.get(client, 0)
        for _ in range(n):
            clock, pos = _var_uint(update, pos, var_uint_bytes)
            length, pos = _var_uint(update, pos, var_uint_bytes)
            if clock + length > held:
                return None
    return ranges


def _new_to(update: bytes, state_vector: bytes) -> bytes:
    """``update`` less what a document at ``state_vector`` has (its items
    past it, and its delete set); b"" when Yrs cannot diff it."""
    try:
        return get_update(update, state_vector)
    except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return b""


MAX_PROBED_RANGES: Final = 1024
"""Delete ranges of an update walked in Python to tell whether Yrs holds
some of its deletions as pending (:func:`_deletion_probe`): a keystroke's
update has one; past this, a pending deletion is not kept for
:meth:`YDoc.diff` (as before), so no update costs more than this walk."""


def _write_var_uint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def _deletion_probe(rest: bytes) -> bytes | None:
    """For an update with no items (``rest``: its first var-uint 0, then its
    delete set), an update of one GC struct per client of its delete set,
    from clock 0 to the furthest end of that client's ranges: less a
    document's state vector (``get_update``), it keeps a struct exactly for
    the clients whose deletions reach past what the document has, the
    deletions Yrs holds as pending. None when it deletes nothing, or more
    than :data:`MAX_PROBED_RANGES` ranges (not walked: a reconnecting
    provider's step 2 carries its whole delete set). Yrs reads ids as u64:
    ten bytes a var-uint."""
    ends: dict[int, int] = {}
    ranges = 0
    clients, pos = _var_uint(rest, 1, 10)
    for _ in range(clients):
        client, pos = _var_uint(rest, pos, 10)
        n, pos = _var_uint(rest, pos, 10)
        ranges += n
        if ranges > MAX_PROBED_RANGES:
            return None
        end = ends.get(client, 0)
        for _ in range(n):
            clock, pos = _var_uint(rest, pos, 10)
            length, pos = _var_uint(rest, pos, 10)
            end = max(end, clock + length)
        if end:
            ends[client] = end
    if not ends:
        return None
    probe = bytearray()
    _write_var_uint(probe, len(ends))
    for client, end in ends.items():
        probe.append(1)  # one struct
        _write_var_uint(probe, client)
        probe.append(0)  # from clock 0
        probe.append(0)  # a GC struct (info 0) …
        _write_var_uint(probe, end)  # … this long
    probe.append(0)  # no delete set
    return bytes(probe)


@dataclass(slots=True)
class _Pending:
    """An update Yrs holds (some of) as pending: items whose dependencies
    have not arrived, or deletions of items it does not have yet."""

    update: bytes
    """The update less what the document had when it was applied."""
    probe: bytes | None
    """Its :func:`_deletion_probe`, made once."""
    client: int | None = None
    """The first Yjs client it has items of, whose earlier items it may wait
    for (None: a deletion, or unread): see :func:`_retry_due`."""

    def waiting(self, state_vector: bytes) -> bool:
        """Whether some of it is still pending in a document at ``state_vector``
        (False when Yrs cannot tell: a damaged update it accepted)."""
        try:
            if get_update(self.update, state_vector)[:1] != b"\x00":
                return True  # items past the state vector: not integrated
            probe = self.probe
            return probe is not None and get_update(probe, state_vector)[:1] != b"\x00"
        except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return False


def _pending(update: bytes, state_vector: bytes) -> _Pending | None:
    """``update``'s pending part in a document at ``state_vector`` that has
    just applied it, or None when Yrs integrated all of it (or cannot diff
    it: a damaged update it accepted is left to Yrs, as before)."""
    try:
        rest = get_update(update, state_vector)
    except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return None
    items = rest[:1] != b"\x00"
    if not items and rest == EMPTY_UPDATE:
        return None
    try:
        probe = None if items else _deletion_probe(rest)
        client = _first_client(rest) if items else None
    except (IndexError, ValueError):  # Yrs decoded it: not expected
        return _Pending(rest, None) if items else None
    entry = _Pending(rest, probe, client)
    return entry if items or (probe is not None and entry.waiting(state_vector)) else None


def _first_client(update: bytes) -> int:
    """The client of an update's first run of structs (it has some)."""
    _, pos = _var_uint(update, 0, 10)  # clients
    _, pos = _var_uint(update, pos, 10)  # that client's structs
    return _var_uint(update, pos, 10)[0]


MAX_RETRIED_PENDING: Final = 64
"""Updates waiting in a Yjs document, at most, that syncd applies again after
an update that moves its state vector (:func:`_retry_pending`). Updates
delivered out of order wait a few at a time; more are a writer's that will
never integrate (their dependency never sent), and applying them all again
on every op would cost each op as much as a merge of them all (1000 of them:
ten times the op): past this they are left to Yrs, as they were."""


MAX_RETRY_ROUNDS: Final = 8
"""Rounds of :func:`_retry_pending` at most: each applies every update still
waiting once, and one round lets in all that wait for what is there; a
chain of them (one waiting for another that Yrs kept waiting) takes a
round a link."""


def _retry_pending(
    doc: Doc[Any], pending: Sequence[tuple[str | None, _Pending]], state_vector: bytes
) -> bytes:
    """Apply the ``pending`` updates still waiting in ``doc`` (at
    ``state_vector``) again, those of one origin merged as one update in one
    transaction, for as long as that moves the state vector: Yrs integrates
    what it kept waiting although what it waited for came (Yrs retries its
    pending updates once per update, merged, and can leave one of two
    behind: tests/crdt/test_ydoc.py). One merge and one apply a round,
    whatever waits: an op after many updates that wait for ever costs about
    what Yrs's own retry of them does. The state vector after. Raises what
    Yrs raises (the caller rebuilds)."""
    for _ in range(MAX_RETRY_ROUNDS):
        groups: dict[str | None, list[bytes]] = {}
        for origin, entry in pending:
            if entry.waiting(state_vector):
                groups.setdefault(origin, []).append(entry.update)
        now = state_vector
        for origin, updates in groups.items():
            now = _integrate(doc, [_merged(updates[0], updates[1:])], origin)
        if now == state_vector:
            break
        state_vector = now
    return state_vector


def _retry_due(still: Sequence[_Pending], let_in: bool, before: bytes, after: bytes) -> bool:
    """Whether to apply the updates ``still`` waiting again after a
    transaction took the document from state vector ``before`` to
    ``after``: at most :data:`MAX_RETRIED_PENDING` of them, and Yrs let some
    in (``let_in``: it may have left more behind), or the clock moved of a
    client one of them has items of (what it may wait for came; Yrs can
    let in none). An update that waits for another client's items that
    never come costs an op nothing more."""
    if not still or len(still) > MAX_RETRIED_PENDING or before == after:
        return False
    if let_in:
        return True
    try:
        was, now = _clocks(before) if before else {}, _clocks(after)
    except (IndexError, ValueError):
        return True
    moved = {client for client, clock in now.items() if clock != was.get(client, 0)}
    return any(entry.client is None or entry.client in moved for entry in still)


def _merged(update: bytes, pending: list[bytes]) -> bytes:
    """``update`` with the ``pending`` updates merged in; ``update`` alone
    when Yrs cannot merge them (a damaged update it accepted)."""
    try:
        return merge_updates(update, *pending)
    except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return update


def b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _waiting_in(state: Mapping[str, Any]) -> list[bytes]:
    """The updates that waited in a snapshot's document
    (:meth:`YDoc.snapshot_state`), each checked as an op's update is; none
    for a state without them (a snapshot written before they were kept, or
    the state of a read). 400/413 otherwise."""
    listed = state.get("pending")
    if listed is None:
        return []
    if type(listed) is not list:
        raise invalid_op("state.pending: must be a list of base64 Yjs updates")
    return [decode_update(text, "state.pending") for text in listed]


class YDoc:
    TYPE: ClassVar[str] = "ydoc"
    OPS: ClassVar[Mapping[str, int]] = {"update": 0x01}
    PREFIX: ClassVar[str] = "yd:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = False
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = True

    __slots__ = (
        "_base",
        "_changes",
        "_depths",
        "_doc",
        "_nesting_reading",
        "_pending",
        "_since",
        "_since_bytes",
    )

    def __init__(self, update: bytes = b"") -> None:
        self._doc: Doc[Any] = Doc()
        self._pending: list[_Pending] | None = None
        """Updates Yrs holds as pending (see :meth:`diff`); None: none. A
        full update (a snapshot's, :meth:`encoded`) never holds any."""
        if update:
            self._doc.apply_update(update)
        self._base = update
        """A full update this document was once equal to …"""
        self._since: list[bytes] = []
        """… and every update applied after it, in order."""
        self._since_bytes = 0
        self._depths: ydoc_nesting.TypeDepths | None = None
        """How deep each item sits (:meth:`_check_nesting`); None: read
        from the document when next needed."""
        self._changes = 0
        """Counts the document's changes: a read of the depths in a thread
        that the document changed under is dropped (:meth:`read_nesting`)."""
        self._nesting_reading: tuple[int, asyncio.Future[ydoc_nesting.TypeDepths]] | None = None
        """The read of the depths under way in a thread, and at which change."""

    @classmethod
    def new(cls) -> Self:
        return cls()

    @property
    def doc(self) -> Doc[Any]:
        """The live document: read it, never write to it (use the ops)."""
        return self._doc

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        op_name(op, self.OPS, self.TYPE)
        check_fields(op, UPDATE_FIELDS)
        text = required(op, "update")
        update = decode_update(text)
        levels = self._check_nesting(update)
        self._apply(update)
        if self._depths is not None:
            self._depths.record(levels)
        return {"op": "update", "update": text}

    def _check_nesting(self, update: bytes) -> ydoc_nesting.Levels:
        """Refuse ``update`` if a type in it would nest deeper than
        MAX_TYPE_DEPTH: Yrs deletes a type's children by recursion on the
        native stack, so a later delete of a chain that deep kills the
        process. Its items' levels, to record once it is applied. Only ops
        are refused: what is stored already (deltas, snapshots) loads."""
        depths = self._depths
        if depths is None:
            depths = self._depths = _read_depths(self._doc.get_update(), self._waiting())
        levels = depths.deepest(update)
        if levels.deepest > ydoc_nesting.MAX_TYPE_DEPTH:
            raise invalid_op(
                f"update: nests Yjs types (maps, arrays, texts, XML) deeper than "
                f"{ydoc_nesting.MAX_TYPE_DEPTH} levels"
            )
        return levels

    @property
    def nesting_unread(self) -> bool:
        """Whether the type depths are not known: the next write reads them
        all (:meth:`read_nesting` first has them read in a thread)."""
        return self._depths is None

    async def read_nesting(self) -> None:
        """Have the type depths of a document of :data:`NESTING_THREAD_BYTES`
        or more read in a thread, if not known, so that its next write does
        not read them on the event loop. Exact all the same: a read the
        document changed under (a delta, a rebuild) is dropped, and the
        write reads them itself. Callers of one document share one read; one
        caller cancelled does not cancel it."""
        if self._depths is not None:
            return
        reading = self._nesting_reading
        if reading is None or reading[0] != self._changes:
            update = self._doc.get_update()
            if len(update) < NESTING_THREAD_BYTES:
                return
            future = asyncio.wrap_future(
                _nesting_reader().submit(_read_depths, update, self._waiting())
            )
            reading = self._nesting_reading = (self._changes, future)
        changes, future = reading
        depths = await asyncio.shield(future)
        if self._nesting_reading is reading:
            self._nesting_reading = None
        if self._depths is None and self._changes == changes:
            self._depths = depths

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        update = binascii.a2b_base64(delta["update"])
        depths = self._depths
        # Kept up to date as for an op (a delta is an update written before):
        # dropped, the whole document was read again at the next op, on the
        # event loop, after each delta of another node.
        levels = depths.deepest(update) if depths is not None else None
        self._apply(update)
        if levels is not None and depths is not None and self._depths is depths:
            depths.record(levels)

    def _apply(self, update: bytes) -> None:
        if update == EMPTY_UPDATE:
            return
        self._changes += 1
        before = self._doc.get_state() if self._pending is not None else None
        try:
            self._doc.apply_update(update)
        except BaseException as exc:  # pyo3's PanicException derives from BaseException
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._rebuild()
            raise invalid_op("update: Yjs could not integrate it (malformed)") from None
        self._note_pending(update, before)
        self._since.append(update)
        self._since_bytes += len(update)
        if self._since_bytes > max(REBUILD_FLOOR_BYTES, len(self._base)):
            self._fold()

    def _note_pending(self, update: bytes, before: bytes | None) -> None:
        """Keep what of ``update`` Yrs left pending, and let go of what it
        integrated of the updates pending before (only when the state
        vector moved since ``before``: nothing else integrates them)."""
        state_vector = self._doc.get_state()
        pending = self._pending
        if pending is not None and before != state_vector:
            still = [entry for entry in pending if entry.waiting(state_vector)]
            if _retry_due(still, len(still) < len(pending), before or b"", state_vector):
                state_vector = self._retry(still, state_vector)
                still = [entry for entry in still if entry.waiting(state_vector)]
            pending = still or None
        entry = _pending(update, state_vector)
        if entry is not None:
            pending = [*pending, entry] if pending else [entry]
        self._pending = pending

    def _retry(self, pending: list[_Pending], state_vector: bytes) -> bytes:
        """Apply again the ``pending`` updates still waiting, while that
        integrates some; the state vector after. Yrs retries what it holds
        as pending once, when an update comes: when that update lets two
        waiting ones in (an update waiting for a client's earlier items and
        one waiting for another's, say), it can integrate one and keep the
        other waiting for good, or integrate none (:func:`_retry_pending`).
        Only when that may help, and while few wait (:func:`_retry_due`)."""
        try:
            return _retry_pending(self._doc, [(None, entry) for entry in pending], state_vector)
        except BaseException as exc:  # pyo3's PanicException derives from BaseException
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._rebuild()  # bytes Yrs took once: not expected
            return self._doc.get_state()

    def _fold(self) -> None:
        self._base = self._doc.get_update()
        # What Yrs holds as pending is not in the full update: it stays as
        # the updates after it, or a rebuild would lose it. Not counted in
        # _since_bytes: bounded by the quotas (they count it), and counted it
        # would fold again on every op while it outweighs the document.
        self._since = self._waiting()
        self._since_bytes = 0

    def _rebuild(self) -> None:
        self._depths = None
        self._changes += 1
        doc: Doc[Any] = Doc()
        if self._base:
            doc.apply_update(self._base)
        for update in self._since:
            doc.apply_update(update)
        self._doc = doc
        state_vector = doc.get_state()
        pending = [_pending(update, state_vector) for update in self._since]
        self._pending = [entry for entry in pending if entry is not None] or None

    def pending_bytes(self) -> int:
        """The bytes of what Yrs holds as pending: not in :meth:`state`, so
        not in the measured size; the quotas add it (syncd/quotas.py)."""
        pending = self._pending
        return 0 if pending is None else sum(len(entry.update) for entry in pending)

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def encoded(self) -> bytes:
        """The whole document as one update (without what Yrs holds as
        pending: see :meth:`diff`)."""
        return self._doc.get_update()

    def state_vector(self) -> bytes:
        return self._doc.get_state()

    def diff(self, state_vector: bytes) -> bytes:
        """What a peer with ``state_vector`` lacks, as one update, with what
        Yrs holds as pending, as Yjs's ``encodeStateAsUpdate`` has it
        (pycrdt's ``get_update`` leaves it out): a peer that joins while an
        update waits for its dependency gets it, as the peers connected when
        it came did, and integrates it when the dependency comes.

        Here and in the state handed to a replica (:meth:`replica_state`,
        and the read view's update) alone: the state (:meth:`state`: the
        measured size)
        keeps the integrated document alone, and a snapshot keeps what waits
        beside it, not merged in (:meth:`snapshot_state`). Yrs does not
        always agree with itself on a damaged update: applied alone it can
        stay pending for good while the same bytes merged into a whole
        document integrate on a reload (tests/crdt/test_ydoc.py's damaged
        updates found it), and a snapshot must read back as the document it
        was taken from."""
        update = self._doc.get_update(state_vector)
        pending = self._pending
        if pending is None:
            return update
        try:
            parts = [get_update(entry.update, state_vector) for entry in pending]
        except BaseException as exc:  # a state vector or an update Yrs cannot diff
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return update
        return _merged(update, parts)

    def view(self, now_ms: int) -> dict[str, Any]:
        """``value``: the whole document as one update, with what Yrs holds
        as pending merged in (as :meth:`replica_state` has it: the same
        bytes). A client that loads it and resumes from the read's seq gets
        only the op deltas after it, and the one that lets a waiting update
        in carries only its dependency: without it merged in here, that
        client would never have it. When nothing waits, :meth:`encoded`
        itself, at the same cost. ``state_vector``: the integrated
        document's (as Yjs's own leaves what it holds as pending out); what
        a client asks for with it is sent again, harmlessly."""
        update = self.encoded()
        if self._pending is not None:
            update = _merged(update, self._waiting())
        return {"value": b64(update), "state_vector": b64(self.state_vector())}

    def state(self) -> JSON:
        self._fold()  # the snapshot's update is a good base to rebuild from
        return {"update": b64(self._base)}

    def replica_state(self) -> JSON:
        """The state as a replica loads it, to apply the op deltas after it:
        a subscription's snapshot (WebSocket, SSE, a resync's catch-up) and
        a ``?format=crdt`` read. :meth:`state`, with what Yrs holds as
        pending merged into its update (as :meth:`diff` gives a joining Yjs
        peer, and Yjs's ``encodeStateAsUpdate`` has it): the replica's Yjs
        or Yrs holds it as pending in turn and integrates it when its
        dependency comes, in an op delta that carries only that dependency.
        Without it a replica that (re)synced while an update waited would
        never get it: acknowledged, durable, and lost to that replica.

        Beside the update, under ``pending``, the same updates each as it
        came (as :meth:`snapshot_state` has them). A Yjs client applies
        ``update`` and leaves the rest; a replica of this type
        (:meth:`from_state`: the Python client's) applies them again one by
        one and so tracks them, as the server does, and applies them again
        when Yrs keeps one waiting after its dependency came (:meth:`_retry`):
        merged into one pending update, Yrs alone kept some waiting for good
        in about one replica in ten that loaded two writers' updates
        delivered out of order (tests/crdt/test_ydoc_replica_state.py).

        When nothing waits, :meth:`state` itself: the same bytes, at the same
        cost. Not for snapshots (they keep what waits apart only, as Yrs can
        disagree with itself on an update merged into a whole document: see
        :meth:`diff`), nor for a root's JSON read and the measured size (the
        integrated document; the quotas count what waits apart,
        :meth:`pending_bytes`). The read view's update is this one
        (:meth:`view`)."""
        state = self.state()
        if self._pending is None:
            return state
        waiting = self._waiting()
        state["update"] = b64(_merged(self._base, waiting))
        state["pending"] = [b64(update) for update in waiting]
        return state

    def snapshot_state(self) -> JSON:
        """The state as a snapshot keeps it (the engine's entry map: store
        snapshots, history checkpoints): :meth:`state`, and under
        ``pending`` the updates Yrs holds as pending, each less what the
        document had when it came, in the order they came; no ``pending``
        when none waits. Without them a document snapshotted while an
        update waits and read back (a restart, or after it left memory)
        would have lost that update, acknowledged and durable, and would not
        integrate it when its dependency comes.

        Kept apart from the document, not merged into it: Yrs can disagree
        with itself on such an update once it is merged into a whole
        document (see :meth:`diff`), and applied alone again, as it came, it
        waits as it did. They are the updates :meth:`pending_bytes` counts,
        so the quotas bound them as they bound the document; a deletion
        past :data:`MAX_PROBED_RANGES` ranges that Yrs holds is left to Yrs,
        untracked (as in :meth:`diff`), and not kept."""
        state = self.state()
        waiting = self._waiting()
        if waiting:
            state["pending"] = [b64(update) for update in waiting]
        return state

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        update = binascii.a2b_base64(state["update"])
        # A state is the merged document, not one client's update: bounded by
        # SERVICE_MAX_CRDT_BYTES, not MAX_UPDATE_BYTES. A document merged from
        # many updates grows past the latter and must still load (snapshots,
        # a CRDT read back after eviction, a revert's base, a replica).
        check_decodes(update, "state.update")
        ydoc = cls(update)
        ydoc._wait(_waiting_in(state))
        return ydoc

    def _wait(self, updates: Sequence[bytes]) -> None:
        """Apply ``updates`` that waited in another copy of this document
        (a snapshot's, one cloned or merged) one by one, in their order, as
        each came: so they wait here as they did there, and syncd tracks
        them again (the retry, the quotas, a joiner's step 2, a rebuild).

        Past :data:`MAX_RETRIED_PENDING` of them (updates that will never
        integrate, most of them, left to Yrs) they go in merged, in one
        call, as Yrs holds what waits (one merged update): one by one, each
        would be merged into what Yrs holds, and loading a thousand would
        take half a second."""
        if len(updates) <= MAX_RETRIED_PENDING:
            for update in updates:
                # Bytes Yrs took once: a refusal is not expected; the rest
                # still loads (the document is rebuilt without that one).
                with contextlib.suppress(ApiError):
                    self._apply(update)
            return
        self._changes += 1
        try:
            self._doc.apply_update(merge_updates(*updates))
        except BaseException as exc:  # pyo3's PanicException derives from BaseException
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._rebuild()  # not expected either: then one by one after all
            for update in updates:
                with contextlib.suppress(ApiError):
                    self._apply(update)
            return
        self._since.extend(updates)
        self._since_bytes += sum(map(len, updates))
        state_vector = self._doc.get_state()
        found = (_pending(update, state_vector) for update in updates)
        held = [entry for entry in found if entry is not None]
        self._pending = [*(self._pending or ()), *held] or None
        if self._since_bytes > max(REBUILD_FLOOR_BYTES, len(self._base)):
            self._fold()

    def _waiting(self) -> list[bytes]:
        pending = self._pending
        return [] if pending is None else [entry.update for entry in pending]

    def merge(self, other: Self) -> None:
        self._depths = None  # read again from the document when next needed
        self._apply(other.encoded())
        self._wait(other._waiting())

    def clone(self) -> Self:
        # With what waits: a batch applies its ops to a clone that then
        # replaces the document (syncd/crdt/engine.py).
        copy = type(self)(self.encoded())
        copy._wait(self._waiting())
        if self._depths is not None:
            copy._depths = self._depths.copy()
        return copy

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """One update that deletes the items the marked updates inserted and
        brings back, as new items with the same content at the same place,
        the items they deleted: Yjs's own undo (Yrs's UndoManager), run on a
        scratch document that replays the base and the window with the
        marked updates under a tracked origin.

        The scratch document keeps deleted items (no garbage collection), so
        undo has the content of what a marked update deleted. Its root types
        are all the roots this document has, each opened as text: an undo
        scope only needs the branch, and the scratch document is never read
        or encoded as those types. Undo leaves alone what others did since:
        an item another writer deleted stays deleted, text others typed
        inside a marked insertion stays. The update is the scratch
        document's difference from before the undo (its new items and its
        delete set).

        An update that was pending when it came (it waited for one that came
        later) is integrated by the transaction of the update it waited for:
        when that one is of the other kind (marked or not), the undo
        manager would take the change for that one's. Then the scratch
        document is replayed again with each such update right after what
        it waited for (:func:`_integration_order`)."""
        if base is None:
            raise ValueError("a Yjs document's revert reads the base")
        # The base as its checkpoint and the updates after it, then the window.
        updates = [binascii.a2b_base64(delta["update"]) for delta in base.deltas]
        if base.state is not None:
            # Its full update, then what waited in it (snapshot_state).
            head = [binascii.a2b_base64(base.state["update"]), *_waiting_in(base.state)]
            updates[0:0] = head
        steps = Window.of(window)
        marks: list[bool | None] = [None] * len(updates)
        marks.extend(steps.marked)
        updates.extend(window_updates(steps))
        roots = list(self._doc.keys())
        # A snapshot's full update holds nothing pending (what waited is kept
        # beside it, and watched).
        whole = 0 if base.state is None else 1
        replay = _replay(roots, updates, marks, range(len(updates)), whole)
        if replay.astray:
            # An update Yrs held as pending was integrated by another writer's
            # transaction: again, each one right after what it waited for.
            replay = _replay(roots, updates, marks, _integration_order(updates), whole)
        scratch, undo = replay.doc, replay.undo
        before = scratch.get_state()
        changed = False
        while undo.can_undo():
            changed = undo.undo() or changed
        if not changed:
            return []
        return [{"op": "update", "update": b64(scratch.get_update(before))}]

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        raise not_restorable(
            "a Yjs document cannot be taken back by updates: Yjs has no op that "
            "brings deleted content back (read the past with ?at=SEQ instead)"
        )


_UPDATE_IN_RECORD: Final = b"\xa2op\x82\xa2op\xa6update\xa6update"
"""In an op record's msgpack encoding, its ``op`` key and the start of a
``ydoc`` delta (``{"op": "update", "update": ...}``, as :meth:`YDoc.apply_op`
makes it), up to the update's string. These bytes occur nowhere else in a
record: never inside a string (``p`` followed by 0x82 is not UTF-8), nor
in an integer (nine bytes at most) or straddling one (the pattern does not
overlap itself), and the fields before ``op`` are all strings and integers."""


def update_in(record: bytes) -> bytes | None:
    """The update of a ``ydoc`` op record read off its msgpack encoding
    (:data:`_UPDATE_IN_RECORD`): a window of ten thousand updates is read
    for a tenth of what decoding each record costs. None when its delta is
    not laid out so (then decode it)."""
    at = record.find(_UPDATE_IN_RECORD)
    if at < 0:
        return None
    at += len(_UPDATE_IN_RECORD)
    head = record[at] if at < len(record) else 0
    if 0xA0 <= head <= 0xBF:  # fixstr
        length, at = head & 0x1F, at + 1
    elif head == 0xD9:  # str 8
        length, at = record[at + 1], at + 2
    elif head == 0xDA:  # str 16
        length, at = int.from_bytes(record[at + 1 : at + 3], "big"), at + 3
    elif head == 0xDB:  # str 32
        length, at = int.from_bytes(record[at + 1 : at + 5], "big"), at + 5
    else:
        return None
    text = record[at : at + length]
    if len(text) != length:
        return None
    try:
        return binascii.a2b_base64(text)
    except binascii.Error:
        return None


_MARKED: Final = "marked"
_OTHER: Final = "other"
"""Transaction origins on a revert's scratch document: the undo manager
tracks the first only."""

REVERT_CAPTURE_MS: Final = 2**31 - 1
"""The undo manager's capture timeout on a revert's scratch document; with
its clock at 0 (:func:`_no_time`) it never extends a step, whatever this is."""


def _no_time() -> int:
    """The undo manager's clock during a revert: always 0. Yrs extends the
    last undo step only when the last change has a time above 0, so every
    transaction of marked updates (each run of them) is an undo step of its
    own, undone one after the other, latest first. One step for them all
    would take one undo call instead of hundreds (a clock stuck at 1), but
    Yrs 0.28 panics undoing such a step when one Yjs client's items lie both
    in the marked updates and between them (an agent writing from one
    document under two origins): tests/crdt/test_revert.py."""
    return 0


def window_updates(window: Window) -> list[bytes]:
    """Every update of the window, in order: read off the records' encoding
    where the store hands them over so (:func:`update_in`), else decoded."""
    encodings = window.encodings()
    out: list[bytes] = []
    for i in range(len(window)):
        found = None if encodings is None else update_in(encodings[i])
        if found is None:
            found = binascii.a2b_base64(window.delta(i)["update"])
        out.append(found)
    return out


@dataclass(slots=True)
class _Replay:
    """A revert's scratch document and the undo manager that tracked it."""

    doc: Doc[Any]
    undo: UndoManager
    astray: bool
    """Whether an update Yrs held as pending was when a transaction of the
    other kind (marked or not) ran: the undo manager may then have taken
    some of its changes for that transaction's (:func:`_watch`)."""


def _origin(mark: bool | None) -> str | None:
    """A transaction's origin on the scratch document: the base's none."""
    if mark is None:
        return None
    return _MARKED if mark else _OTHER


def _replay(
    roots: Sequence[str],
    updates: Sequence[bytes],
    marks: Sequence[bool | None],
    order: Sequence[int],
    whole: int = 0,
) -> _Replay:
    """Replay ``updates`` in ``order`` (their indices) on a scratch document
    that keeps deleted items (no garbage collection: undo needs the content
    of what a marked update deleted), with the marked ones (``marks``: True)
    under a tracked origin.

    Its root types are all the roots the document has (``roots``), each
    opened as text before any content arrives: an undo scope only needs the
    branch, and the scratch document is never read or encoded as those
    types. Each run of updates of one kind (the base's: None, marked,
    others') goes in as one transaction (a transaction costs more than a
    small update); the undo manager tracks the marked ones' changes as it
    would one by one. After each transaction the updates Yrs holds as
    pending are watched (:func:`_watch`) and, as on the document, applied
    again once what they wait for may have come (:func:`_retry_pending`),
    each under its own origin; not the first ``whole`` updates (a snapshot's
    full update, which holds nothing pending: diffing it against the state
    vector would cost as much as integrating it)."""
    doc: Doc[Any] = Doc(skip_gc=True)
    scopes: list[BaseType] = [doc.get(name, type=Text) for name in roots]
    undo: UndoManager | None = None
    waiting: list[tuple[bool, _Pending]] = []
    astray = False
    watching = True
    state_vector = b""
    i, n = 0, len(order)
    while i < n:
        mark, start = marks[order[i]], i
        while i < n and marks[order[i]] == mark:
            i += 1
        if mark is not None and undo is None:  # the base is never tracked
            undo = _undo_manager(scopes)
        run = [updates[k] for k in order[start:i]]
        before, state_vector = state_vector, _integrate(doc, run, _origin(mark))
        if not watching:
            continue
        watched = (
            run if order[start] >= whole else [updates[k] for k in order[start:i] if k >= whole]
        )
        waited = len(waiting)
        waiting, strayed, kept = _watch(waiting, watched, mark is True, state_vector)
        astray = astray or strayed
        if len(waiting) > MAX_RETRIED_PENDING:
            # Updates that will never integrate, most of them: watching them
            # after every run would cost the revert as much again per run
            # (and the document leaves them to Yrs too).
            watching, waiting = False, []
        elif _retry_due([entry for _, entry in waiting], kept < waited, before, state_vector):
            # As the document does (YDoc._retry).
            retry = [(_origin(was), entry) for was, entry in waiting]
            state_vector = _retry_pending(doc, retry, state_vector)
            waiting = [(was, entry) for was, entry in waiting if entry.waiting(state_vector)]
    return _Replay(doc, undo or _undo_manager(scopes), astray)


def _watch(
    waiting: list[tuple[bool, _Pending]], run: Sequence[bytes], marked: bool, state_vector: bytes
) -> tuple[list[tuple[bool, _Pending]], bool, int]:
    """After a transaction of ``run`` (``marked`` or not) left the scratch
    document at ``state_vector``: the updates still pending, each with
    whether it is marked; whether one of the other kind was pending when
    the transaction ran; and how many of ``waiting`` still wait. Then the undo manager may have tracked what
    it should not: that transaction may have integrated it, all or part (a
    delete set whose items come in several updates), and Yrs's undo manager
    counts a transaction's insertions by the state vector, which a pending
    update of the same Yjs client skews (tests/crdt/test_revert.py). The
    run is looked at as a whole first (:func:`_integrated`), each update of
    it only when some of it may wait."""
    astray = False
    still: list[tuple[bool, _Pending]] = []
    for was, entry in waiting:
        astray = astray or was != marked
        if entry.waiting(state_vector):
            still.append((was, entry))
    kept = len(still)
    if run and _integrated(run, state_vector):
        return still, astray, kept
    clocks = _clocks(state_vector)
    for update in run:
        if _integrated((update,), state_vector, clocks):
            continue
        held = _pending(update, state_vector)
        if held is not None:
            still.append((marked, held))
    return still, astray, kept


MAX_WATCHED_DELETE_SET_BYTES: Final = 4096
"""The delete set of a run of updates a revert's replay walks to tell
whether some of it waits (about seven hundred ranges; a walk per run). An
editor's update carries its own transaction's deletions (a range or a
few); updates that carry a whole document's delete set (a sync step 2, or
pycrdt's ``get_update``) are taken as integrated past this, as
:func:`_pending` takes one past :data:`MAX_PROBED_RANGES`: walking them
for every run of a long window would cost more than the revert."""


def _integrated(
    run: Sequence[bytes], state_vector: bytes, clocks: dict[int, int] | None = None
) -> bool:
    """Whether the updates of ``run`` were integrated whole by a document at
    ``state_vector`` (``clocks``: the same, read), told for the run at once
    (merged, one call into Yrs: a call per update costs as much as
    integrating it): less the state vector, what remains is empty or a
    delete set of items below it. False when some may wait, or Yrs cannot
    tell (the caller looks at each)."""
    try:
        rest = _raw_get_update(run[0] if len(run) == 1 else merge_updates(*run), state_vector)
    except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return False
    if rest == EMPTY_UPDATE:
        return True  # nearly every run: insertions
    if rest[:1] != b"\x00":
        return False  # items past the state vector: waiting
    if len(rest) > MAX_WATCHED_DELETE_SET_BYTES:
        return True  # a whole document's delete set: not walked (see the constant)
    return _deletes_within(rest, _clocks(state_vector) if clocks is None else clocks)


def _clocks(state_vector: bytes, var_uint_bytes: int = 10) -> dict[int, int]:
    """A state vector's clock per client (Yrs reads ids as u64: ten bytes a
    var-uint, unless told fewer)."""
    clocks: dict[int, int] = {}
    count, pos = _var_uint(state_vector, 0, var_uint_bytes)
    for _ in range(count):
        client, pos = _var_uint(state_vector, pos, var_uint_bytes)
        clocks[client], pos = _var_uint(state_vector, pos, var_uint_bytes)
    return clocks


def _deletes_within(rest: bytes, clocks: dict[int, int]) -> bool:
    """Whether an update with no items (``rest``) deletes only items below
    ``clocks`` (none of it waits): what :func:`_pending` tells of it, in a
    walk of its delete set instead of three calls into Yrs and a probe. False
    when it does not read so (then :func:`_pending` decides)."""
    try:
        return _ranges_below(rest, clocks, None, 10) is not None
    except (IndexError, ValueError):
        return False


def _undo_manager(scopes: list[BaseType]) -> UndoManager:
    """The undo manager of a revert's scratch document: it tracks the marked
    updates' transactions alone."""
    undo = UndoManager(scopes=scopes, capture_timeout_millis=REVERT_CAPTURE_MS, timestamp=_no_time)
    undo.include_origin(_MARKED)
    return undo


MAX_ORDER_PASSES: Final = 8
"""Passes of :func:`_integration_order` at most: each moves every update
that waited after what it waited for, so a chain of updates each waiting
for the next (delivered latest first) needs one pass a link. Past this the
revert goes on with the last order (what still waits is taken for the
transaction that integrates it)."""


def _integration_order(updates: Sequence[bytes]) -> list[int]:
    """The indices of ``updates`` in an order where none waits: each update
    Yrs would hold as pending comes right after the one it waited for, and
    so integrates in its own transaction, under its own origin. One that
    never integrates keeps its place (it stays pending either way)."""
    order = list(range(len(updates)))
    for _ in range(MAX_ORDER_PASSES):
        moved = _order_pass([updates[k] for k in order])
        if moved is None:
            break
        order = [order[k] for k in moved]
    return order


def _order_pass(updates: Sequence[bytes]) -> list[int] | None:
    """One pass of :func:`_integration_order`: ``updates`` applied one by one
    to a document, the pending ones watched after each; the indices with
    each that waited moved right after the one that integrated it (several
    after one: in their order, which the next pass puts right if one of them
    waited for another), or None when none waited, or more than
    :data:`MAX_RETRIED_PENDING` wait at once."""
    doc: Doc[Any] = Doc(skip_gc=True)
    due = list(range(len(updates)))
    waiting: list[tuple[int, _Pending]] = []
    moved = False
    state_vector = b""
    for k, update in enumerate(updates):
        if update == EMPTY_UPDATE:
            continue
        before, state_vector = state_vector, _integrate(doc, [update], None)
        still = _let_in(waiting, state_vector, due, k)
        if len(still) > MAX_RETRIED_PENDING:
            return None  # mostly updates that never integrate: as _replay, not watched
        let_in = len(still) < len(waiting)
        if _retry_due([entry for _, entry in still], let_in, before, state_vector):
            # As the document does (YDoc._retry).
            retry = [(None, entry) for _, entry in still]
            state_vector = _retry_pending(doc, retry, state_vector)
            still = _let_in(still, state_vector, due, k)
        moved = moved or len(still) < len(waiting)
        held = _pending(update, state_vector)
        if held is not None:
            still.append((k, held))
        waiting = still
    if not moved:
        return None
    return sorted(range(len(updates)), key=lambda i: (due[i], due[i] != i, i))


def _let_in(
    waiting: list[tuple[int, _Pending]], state_vector: bytes, due: list[int], k: int
) -> list[tuple[int, _Pending]]:
    """Those of ``waiting`` still pending at ``state_vector``; each of the
    others integrated by update ``k`` (``due``)."""
    still: list[tuple[int, _Pending]] = []
    for i, entry in waiting:
        if entry.waiting(state_vector):
            still.append((i, entry))
        else:
            due[i] = k
    return still


def _integrate(doc: Doc[Any], updates: Sequence[bytes], origin: str | None) -> bytes:
    """Apply ``updates`` to ``doc`` in one transaction with ``origin``; the
    document's state vector after them.

    Through pycrdt's Rust document directly (its ``_doc``; pycrdt is pinned
    to 0.14 in pyproject.toml): ``Doc.apply_update`` and the ``transaction``
    context wrap every call in Python bookkeeping that costs as much as
    Yrs integrating a one-character update, and a revert applies ten
    thousand of them. The origin goes in as pycrdt's own transactions
    carry it (:func:`pycrdt._transaction.hash_origin`), so an undo manager
    told ``include_origin(origin)`` tracks it. The state vector is read in
    the same transaction (``Doc.get_state`` would open another)."""
    raw = doc._doc
    txn = (
        raw.create_transaction()
        if origin is None
        else raw.create_transaction_with_origin(hash_origin(origin))
    )
    try:
        for update in updates:
            if update != EMPTY_UPDATE:
                raw.apply_update(txn, update)
        state_vector = raw.get_state(txn)
        txn.commit()
    finally:
        txn.drop()
    return state_vector


def read_root_view(update: bytes, name: str, kind: str) -> tuple[Any, list[str]]:
    """The JSON view of root type ``name`` read as ``kind`` (one of
    ROOT_KINDS) and, when it is empty, the kinds that show its content
    (:func:`kinds_with_content`): the service's ``?root=`` read, from one
    decode of ``update`` (it cost one for the view and up to four more for
    the kinds).

    Read from a scratch copy: asking a Yjs document for a root type fixes that
    root's type, which must not happen to the live one on a read. In the
    scratch copy reading the root as several kinds in turn gives what a copy
    of its own per kind gives (pycrdt 0.14, as pinned; tests/crdt/test_ydoc.py).
    """
    if kind not in ROOT_KINDS:
        raise ValueError(kind)
    doc, items = _decoded(update, name, arrays=kind == "array")
    value = _view(doc, items, name, kind)
    return value, ([] if value else _kinds(doc, name))


def root_view(update: bytes, name: str, kind: str) -> Any:
    """The JSON view of root type ``name`` read as ``kind`` (one of ROOT_KINDS)."""
    if kind not in ROOT_KINDS:
        raise ValueError(kind)
    doc, items = _decoded(update, name, arrays=kind == "array")
    return _view(doc, items, name, kind)


def _decoded(update: bytes, name: str, arrays: bool) -> tuple[Doc[Any], list[Any] | None]:
    """A scratch document of ``update`` and, when ``arrays``, the items of root
    ``name`` read as an array, in one pass: the insert a new document's
    array reports as the update integrates. pycrdt reads an array one index
    at a time, each from the array's start, so iterating a long one cost
    time quadratic in its items: a text of 200,000 characters in 2,000
    pieces took 2.4 s as an array, one of 2 MB four minutes."""
    doc: Doc[Any] = Doc()
    if not arrays:
        doc.apply_update(update)
        return doc, None
    array = doc.get(name, type=Array)
    deltas: list[list[dict[str, Any]]] = []
    subscription = array.observe(lambda event: deltas.append(event.delta))
    try:
        doc.apply_update(update)
    finally:
        array.unobserve(subscription)
    return doc, [item for delta in deltas for change in delta for item in change.get("insert", ())]


def _view(doc: Doc[Any], items: list[Any] | None, name: str, kind: str) -> Any:
    if kind == "array":
        assert items is not None
        return [_plain(item, 2) for item in items]
    if kind == "text":
        return str(doc.get(name, type=Text))
    if kind == "map":
        return _plain(doc.get(name, type=Map))
    return _xml(doc.get(name, type=XmlFragment))


def kinds_with_content(update: bytes, name: str) -> list[str]:
    """The kinds (of ROOT_KINDS) root type ``name`` reads as with something
    in it, the likeliest first; none for a root the document does not have."""
    return _kinds(_decoded(update, name, arrays=False)[0], name)


def _kinds(doc: Doc[Any], name: str) -> list[str]:
    """:func:`kinds_with_content` of a scratch document.

    A Yjs update does not say which kind a root is, so a root read as another
    kind than its own reads empty (a map read as text): this says how to read
    it. An XML fragment also reads as an array of its children, but is one:
    xml comes first and that array is left out. Each kind is tested without
    making its view: a long text's array view costs time quadratic in its
    length (pycrdt reads an array one index at a time, each from the start),
    2.4 s for 200,000 characters. A root the document does not have reads
    empty as every kind."""
    found: list[str] = []
    fragment_children = False
    for kind in ROOT_KINDS:
        if kind == "text":
            shows = bool(str(doc.get(name, type=Text)))
        elif kind == "map":
            shows = len(doc.get(name, type=Map)) > 0
        elif kind == "array":
            array = doc.get(name, type=Array)
            shows = len(array) > 0
            fragment_children = shows and isinstance(array[0], (XmlElement, XmlText))
        else:
            # One too deep to write has elements, so content: say so, unwritten.
            fragment = doc.get(name, type=XmlFragment)
            shows = _xml_too_deep(fragment) or bool(str(fragment))
        if shows:
            found.append(kind)
    if "xml" in found and fragment_children:
        found.remove("array")
        found.remove("xml")
        found.insert(0, "xml")
    return found


MAX_VIEW_DEPTH: Final = 256
"""Levels of maps and arrays (Yjs types or JSON values in them, the root the
first) a root's JSON view holds at most: it is built, and written as JSON,
by recursion, and arrays in arrays 3,000 deep (an update of 39 KB) raised
RecursionError. Deeper than an editor's data nests; the XML of a fragment
has its own bound (:data:`MAX_XML_DEPTH`)."""

MAX_XML_DEPTH: Final = 4096
"""Levels of XML (the fragment or element written the first, each element
in it the next) whose XML text a read writes at most. Yrs writes it by
recursion on the native stack, where no RecursionError stops it: elements
nested 40,000 deep (an update of 343 KB) overflowed a thread's 8 MiB and
the server died of SIGSEGV; 20,000 wrote. This many take some 1 MiB, and
are far deeper than an editor's documents nest. Not MAX_VIEW_DEPTH: the
XML is written by Yrs, not by Python's recursion, and is one JSON string."""


class ViewTooDeep(ValueError):
    """A root's JSON view would nest deeper than :data:`MAX_VIEW_DEPTH`."""


def _deeper(depth: int) -> int:
    """The level of what a map or an array at ``depth`` holds."""
    if depth > MAX_VIEW_DEPTH:
        raise ViewTooDeep(f"nested deeper than {MAX_VIEW_DEPTH} levels of maps and arrays")
    return depth + 1


def _plain(value: Any, depth: int = 1) -> Any:
    """A root read as a map or an array, as ``to_py`` gives it, except that an
    XML type anywhere in it (a root that holds XML, read as an array; an
    XmlElement kept in a map) is its XML text: ``to_py`` raises for those,
    and a read must answer, not fail with a 500. ``depth``: the level of
    ``value``, the root the first (:data:`MAX_VIEW_DEPTH`)."""
    if isinstance(value, (XmlFragment, XmlElement)):
        return _xml(value)
    if isinstance(value, (XmlText, Text)):
        return str(value)
    if isinstance(value, Map):
        below = _deeper(depth)
        # Taken first: pycrdt's items() holds a transaction open while it
        # yields, and reading an array held in the map changes the document.
        entries = list(value.items())
        return {key: _plain(item, below) for key, item in entries}
    if isinstance(value, Array):
        below = _deeper(depth)
        return [_plain(item, below) for item in _nested_items(value)]
    return _json(value, depth)


def _xml(node: XmlFragment | XmlElement) -> str:
    """The XML text of ``node``; ViewTooDeep past :data:`MAX_XML_DEPTH`."""
    if _xml_too_deep(node):
        raise ViewTooDeep(f"nested deeper than {MAX_XML_DEPTH} levels of XML elements")
    return str(node)


def _xml_too_deep(node: XmlFragment | XmlElement) -> bool:
    """Whether ``node`` holds elements nested deeper than :data:`MAX_XML_DEPTH`
    (``node`` the first level), found a level at a time without recursion,
    and stopping there. On Yrs's own types in one transaction: pycrdt's
    ``children`` opens one per node and wraps each child, 0.39 s for 40,000
    paragraphs where this takes 0.015 s (writing their XML, 0.05 s). A text
    holds no element that its XML writes (an embedded one is left out)."""
    with node.doc.transaction() as txn:
        raw = txn._txn
        assert raw is not None
        level = [node.integrated]
        for _ in range(MAX_XML_DEPTH):
            level = [
                child
                for parent in level
                for child in parent.children(raw)
                if not isinstance(child, _RawXmlText)
            ]
            if not level:
                return False
    return True


INDEXED_ITEMS_AT_MOST: Final = 64
"""An array held in a map or an array at most this long is read one index at
a time (pycrdt's iteration, each index from the array's start: quadratic,
and cheap this short); a longer one in one pass (:func:`_nested_items`)."""


def _nested_items(array: Array[Any]) -> list[Any]:
    """The items of an array held in a map or an array of a scratch document
    (the read changes it), in one pass.

    pycrdt reads an array one index at a time, each from its start: 4,000
    pieces took 0.08 s, about 1 MiB ~85 s. The one-pass read of a root
    (:func:`_decoded`) does not reach an array held in another: Yrs reports
    a type's changes only when it existed before the transaction, and a held
    array comes with its items in the same update. So its items are deleted
    (one call) and the deletion undone: the undo brings them back, in order
    and as they were (binary stays binary, where ``to_json`` writes a list
    of numbers; a type it holds comes back as a copy of its own with its
    content), as inserts the array reports in one event. A short array, or
    one the undo does not give back whole, is read index by index."""
    length = len(array)
    if length <= INDEXED_ITEMS_AT_MOST:
        return list(array)
    deltas: list[list[dict[str, Any]]] = []
    try:
        undo = UndoManager(scopes=[array], capture_timeout_millis=0)
        del array[0:length]
        subscription = array.observe(lambda event: deltas.append(cast(Any, event).delta))
        try:
            undo.undo()
        finally:
            array.unobserve(subscription)
    except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        deltas = []
    items = [item for delta in deltas for change in delta for item in change.get("insert", ())]
    return items if len(items) == length else list(array)


def _json(value: Any, depth: int) -> Any:
    """A map's or an array's values as JSON can hold them: binary
    (``Uint8Array``) as base64, as the API gives binary; a float JSON has no
    word for (NaN, the infinities) as null, as ``JSON.stringify`` writes it;
    a whole number as the integer JavaScript writes (:func:`_number`); a
    subdocument as ``{"guid"}``. ``depth``: its level (:func:`_plain`)."""
    if isinstance(value, dict):
        below = _deeper(depth)
        return {key: _json(item, below) for key, item in value.items()}
    if isinstance(value, list):
        below = _deeper(depth)
        return [_json(item, below) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return b64(bytes(value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, Doc):
        return {"guid": value.guid}
    return value


_PLAIN_BELOW: Final = 1e21
"""Whole numbers below this in magnitude JavaScript writes without an
exponent (``Number.prototype.toString``); from here on it writes ``1e+21``,
as Python does."""


def _number(value: float) -> float | int | None:
    """A Yjs number as JSON: Yjs has one number type and Yrs hands every one
    to Python as a float, so the ``1`` a client set would read ``1.0``. A
    whole number is the integer whose digits JavaScript writes
    (:func:`~syncd.crdt.validate.es_number`, as canonical JSON writes numbers:
    ``1.0`` is ``1``, ``-0.0`` is ``0``, ``1e16`` is ``10000000000000000``);
    other floats stay floats, NaN and the infinities are null."""
    if not math.isfinite(value):
        return None
    if value.is_integer() and -_PLAIN_BELOW < value < _PLAIN_BELOW:
        return int(es_number(value))
    return value
