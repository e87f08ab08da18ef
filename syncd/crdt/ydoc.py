"""A Yjs document (``ydoc``, ids ``yd:…``), merged by Yrs through pycrdt.

Theory of operation
-------------------
The op is a Yjs update (v1 encoding), base64 in JSON: ``{"op": "update",
"update": "<base64>"}``. Yjs updates are themselves CRDT deltas: applying one
twice, or several in any order, gives the same document, so the delta op is
the update as received and :meth:`YDoc.apply_delta` is the same call. An
update whose dependencies have not arrived yet is held by Yrs as pending and
integrated when they do, exactly as in a browser.

The read view is the whole document as one update plus its state vector
(what a Yjs client needs to load it, or to ask for only what it lacks);
:func:`root_view` gives a JSON view of one named root type. ``state()`` is the
merged document as one update, so snapshots hold the document, not the list
of updates that built it.

Refusing bad input without corrupting the document: an update must decode
(checked without touching the document) and be at most
:data:`MAX_UPDATE_BYTES`. A decodable update can still make Yrs panic while
integrating it (a forged reference, say), half-way through. So the type keeps
what it can rebuild from, the last full update plus the updates applied
since (bounded: folded into a new full update once they outweigh it), and
after a failed apply rebuilds the document from those, and refuses the op.
"""

from __future__ import annotations

import binascii
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

from pycrdt import (
    Array,
    Doc,
    Map,
    Text,
    UndoManager,
    XmlFragment,
    get_state,
    get_update,
    merge_updates,
)
from pycrdt._transaction import hash_origin

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.validate import check_fields, op_fields, op_name, required
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
    except binascii.Error:
        raise invalid_op(f"{field}: not valid base64") from None
    check_update(update, field)
    return update


def check_update(update: bytes, field: str = "update") -> None:
    if len(update) > MAX_UPDATE_BYTES:
        raise too_large(f"{field}: over {MAX_UPDATE_BYTES} bytes")
    check_decodes(update, field)


def check_decodes(update: bytes, field: str) -> None:
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
    deletes what a document with ``state_vector`` holds: no items (its first
    var-uint, the clients with structs, is 0) and every range of its delete
    set below the document's clock for that client (a range past it would
    wait in Yrs's pending delete set). None otherwise, for anything that does
    not read so, or past ``most`` ranges (the walk stops there)."""
    if type(text) is not str or len(text) > (MAX_UPDATE_BYTES // 3 + 1) * 4:
        return None
    try:
        update = binascii.a2b_base64(text, strict_mode=True)
        if update[:1] != b"\x00":
            return None  # items (or not an update)
        clocks: dict[int, int] = {}
        count, pos = _var_uint(state_vector, 0)
        for _ in range(count):
            client, pos = _var_uint(state_vector, pos)
            clocks[client], pos = _var_uint(state_vector, pos)
        ranges = 0
        clients, pos = _var_uint(update, 1)
        for _ in range(clients):
            client, pos = _var_uint(update, pos)
            n, pos = _var_uint(update, pos)
            ranges += n
            if ranges > most:
                return None
            held = clocks.get(client, 0)
            for _ in range(n):
                clock, pos = _var_uint(update, pos)
                length, pos = _var_uint(update, pos)
                if clock + length > held:
                    return None
        return ranges
    except (binascii.Error, IndexError, ValueError):
        return None


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
    except (IndexError, ValueError):  # Yrs decoded it: not expected
        return _Pending(rest, None) if items else None
    entry = _Pending(rest, probe)
    return entry if items or (probe is not None and entry.waiting(state_vector)) else None


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


class YDoc:
    TYPE: ClassVar[str] = "ydoc"
    OPS: ClassVar[Mapping[str, int]] = {"update": 0x01}
    PREFIX: ClassVar[str] = "yd:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = False
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = True

    __slots__ = ("_base", "_doc", "_pending", "_since", "_since_bytes")

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
        self._apply(update)
        return {"op": "update", "update": text}

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        self._apply(binascii.a2b_base64(delta["update"]))

    def _apply(self, update: bytes) -> None:
        if update == EMPTY_UPDATE:
            return
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
            pending = [entry for entry in pending if entry.waiting(state_vector)] or None
        entry = _pending(update, state_vector)
        if entry is not None:
            pending = [*pending, entry] if pending else [entry]
        self._pending = pending

    def _fold(self) -> None:
        self._base = self._doc.get_update()
        self._since = []
        self._since_bytes = 0

    def _rebuild(self) -> None:
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

        Only here: the snapshot (:meth:`state`) and the reads keep the
        integrated document alone. Yrs does not always agree with itself on
        a damaged update: applied alone it can stay pending for good while
        the same bytes merged into a whole document integrate on a reload
        (tests/crdt/test_ydoc.py's damaged updates found it), and a snapshot
        must read back as the document it was taken from."""
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
        return {"value": b64(self.encoded()), "state_vector": b64(self.state_vector())}

    def state(self) -> JSON:
        self._fold()  # the snapshot's update is a good base to rebuild from
        return {"update": b64(self._base)}

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        update = binascii.a2b_base64(state["update"])
        # A state is the merged document, not one client's update: bounded by
        # SERVICE_MAX_CRDT_BYTES, not MAX_UPDATE_BYTES. A document merged from
        # many updates grows past the latter and must still load (snapshots,
        # a CRDT read back after eviction, a revert's base, a replica).
        check_decodes(update, "state.update")
        return cls(update)

    def merge(self, other: Self) -> None:
        self._apply(other.encoded())

    def clone(self) -> Self:
        return type(self)(self.encoded())

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
        delete set)."""
        if base is None:
            raise ValueError("a Yjs document's revert reads the base")
        scratch: Doc[Any] = Doc(skip_gc=True)
        # Open the roots before any content arrives, as the same branches.
        scopes = [scratch.get(name, type=Text) for name in list(self._doc.keys())]
        # The base goes in as its checkpoint and the updates after it, in one
        # transaction: no document is built for it on the way.
        updates = [binascii.a2b_base64(delta["update"]) for delta in base.deltas]
        if base.state is not None:
            updates.insert(0, binascii.a2b_base64(base.state["update"]))
        _integrate(scratch, updates, None)
        undo = UndoManager(
            scopes=scopes, capture_timeout_millis=REVERT_CAPTURE_MS, timestamp=_no_time
        )
        undo.include_origin(_MARKED)
        # Each run of marked or of unmarked updates in one transaction (a
        # transaction costs more than a small update): the undo manager
        # tracks the marked ones' changes as it would one by one.
        steps = Window.of(window)
        marked = steps.marked
        updates = window_updates(steps)
        i, n = 0, len(marked)
        while i < n:
            flag, start = marked[i], i
            while i < n and marked[i] == flag:
                i += 1
            _integrate(scratch, updates[start:i], _MARKED if flag else _OTHER)
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


def _integrate(doc: Doc[Any], updates: Sequence[bytes], origin: str | None) -> None:
    """Apply ``updates`` to ``doc`` in one transaction with ``origin``.

    Through pycrdt's Rust document directly (its ``_doc``; pycrdt is pinned
    to 0.14 in pyproject.toml): ``Doc.apply_update`` and the ``transaction``
    context wrap every call in Python bookkeeping that costs as much as
    Yrs integrating a one-character update, and a revert applies ten
    thousand of them. The origin goes in as pycrdt's own transactions
    carry it (:func:`pycrdt._transaction.hash_origin`), so an undo manager
    told ``include_origin(origin)`` tracks it."""
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
        txn.commit()
    finally:
        txn.drop()


def root_view(update: bytes, name: str, kind: str) -> Any:
    """The JSON view of root type ``name`` read as ``kind`` (one of ROOT_KINDS).

    Read from a scratch copy: asking a Yjs document for a root type fixes that
    root's type, which must not happen to the live one on a read.
    """
    doc: Doc[Any] = Doc()
    doc.apply_update(update)
    if kind == "text":
        return str(doc.get(name, type=Text))
    if kind == "map":
        return _json(doc.get(name, type=Map).to_py())
    if kind == "array":
        return _json(doc.get(name, type=Array).to_py())
    if kind == "xml":
        return str(doc.get(name, type=XmlFragment))
    raise ValueError(kind)


def _json(value: Any) -> Any:
    """A map's or an array's values as JSON can hold them: binary
    (``Uint8Array``) as base64, as the API gives binary; a float JSON has no
    word for (NaN, the infinities) as null, as ``JSON.stringify`` writes it;
    a subdocument as ``{"guid"}``."""
    if isinstance(value, dict):
        return {key: _json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return b64(bytes(value))
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Doc):
        return {"guid": value.guid}
    return value
