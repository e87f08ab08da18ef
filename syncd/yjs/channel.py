"""One Yjs document on one connection: what y-websocket and Hocuspocus share.

Theory of operation
-------------------
A :class:`YjsChannel` joins one document to one socket. It holds the
document's sans-I/O :class:`~syncd.yjs.protocol.YjsSession` and carries
out its actions; the socket adapter that owns it (a y-websocket connection
has one channel, a Hocuspocus connection one per document, each on the
WebSocket stack every socket runs on) frames what the channel sends and
reads what it is given:

- an update goes through the same service as every op (write permission,
  rate limit, the engine, the durable store or the cluster's database,
  webhooks, metrics) as ``{"op": "update", ...}`` on the document. It
  reaches the other channels as the hub's delta, only once durable, like
  every delta; the writer's own echo is skipped. The owner hears of each
  update's outcome (Hocuspocus acknowledges them).
- a step 1 is answered from the engine's document: exactly what the peer's
  state vector lacks, so a reconnecting provider gets only what it missed;
  while edits of the document are still on their way to disk (or into a
  commit) the answer waits for them, as a delta does.
  A fresh provider (an empty state vector) lacks the whole document: that
  update is encoded once and the same bytes go to every fresh provider
  (:mod:`syncd.shared_states`), written in slices as each socket drains
  (:meth:`~syncd.ws.base_connection.BaseConnection.feed`), so a join storm
  holds one copy, not one per joiner. While one is alive, a provider that
  joins after a few more updates (at most :data:`SHARED_MAX_LAG_OPS`) gets
  it too and, right after its step 2, an update with what it lacks (the diff
  by the state vector kept with it), so an edited document is not encoded
  per joiner either. The same goes for the whole document sent after a lag.
- awareness goes to the room (:mod:`syncd.yjs.room`).

The channel joins the hub before it sends its step 1, so nothing committed
in between is missed (a delta the step 2 already covered is a no-op for Yjs).
A document that is not in memory is read first, and the socket is not read
meanwhile: the peer's step 1 must be answered from the whole document. So is
each later step 1 that finds it gone (a failed write, and the rebuild after
it, drop documents the hub subscription had kept): a peer is never told that
a document it joins is empty because memory does not hold it yet.

Over the token's rate limit an update waits, and the owner stops reading the
socket meanwhile: y-websocket cannot be told to slow down, so it is slowed
down. So does each step 1 of the peer's but the first (the join, which the
upgrade or the Hocuspocus auth paid for), whose answer may be the whole
document, and each query-awareness, whose answer is every awareness state
of the room: each counts against the limit as an update does. A refused
update closes the connection: 1007 for one that is malformed or too large
(400/413), 4401 for an expired token, 1008 for another permission refused
after the handshake, 1013 for a store that is unavailable, so the provider
reconnects later and syncs by state vector.

The channel's read ends at :attr:`YjsChannel.until` (the token's expiry, or
earlier the end of the rules that grant it); the owner's expiry timer closes
the connection then (:data:`CLOSE_TOKEN_EXPIRED` or
:data:`CLOSE_READ_EXPIRED`), and deltas of ops made from then on (by their
``ts``) are never sent, even before the timer has had its turn.

A deleted document is not created again by an editor that still holds a
copy of it: a provider sends its whole copy whenever it connects again (its
step 2, or an update), and Hocuspocus's provider cannot be told not to. For
a while after this node deleted it (:class:`~syncd.crdt.ydoc.DeletedYDocs`),
an update that would create the document and carries a client of the
deleted one closes the channel with :data:`CLOSE_DOCUMENT_DELETED` and
"document deleted", as the deletion did, and writes nothing; a fresh editor
(new client ids) creates it, as an HTTP write does.

A revoked token (docs/permissions.md#revoking-tokens) closes the connection
at once with :data:`CLOSE_TOKEN_EXPIRED` and the reason ``token revoked``: each
channel is registered with the authenticator's revocation table while it is
attached.
"""

from __future__ import annotations

import asyncio
import binascii
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from pycrdt import get_update, merge_updates

from syncd.auth.authenticator import NO_END_MS
from syncd.auth.revocations import TOKEN_REVOKED_MESSAGE
from syncd.crdt import ydoc_nesting
from syncd.crdt.engine import mask_bit
from syncd.crdt.ydoc import MAX_UPDATE_BYTES, YDoc
from syncd.errors import ApiError
from syncd.hub import DeliverEach, EncodedDelta
from syncd.shared_states import SharedState, SharedStates
from syncd.ws.base_session import Action, Send
from syncd.ws.framing import (
    CLOSE_BAD_DATA,
    CLOSE_INTERNAL_ERROR,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOKEN_EXPIRED,
)
from syncd.yjs.protocol import (
    EMPTY_UPDATE,
    SYNC_STEP2,
    SYNC_UPDATE,
    ApplyUpdate,
    EmptyUpdate,
    ReadOnlyUpdate,
    RelayAwareness,
    SendAwareness,
    SendDiff,
    YjsSession,
    awareness_message,
    sync_head,
    sync_step1,
    sync_step2,
    sync_update,
)
from syncd.yjs.room import MAX_AWARENESS_UPDATE_CLIENTS, AwarenessRefused, Room, Rooms

if TYPE_CHECKING:
    from syncd.auth.authenticator import Authenticator, Principal
    from syncd.config import Settings
    from syncd.crdt.engine import Engine
    from syncd.http.protocol import ServerContext
    from syncd.hub import Hub
    from syncd.metrics import Metrics
    from syncd.service import CrdtService

log = logging.getLogger("syncd.ws")

_loading: set[asyncio.Task[None]] = set()
"""Documents being read from the store for a joining peer (kept from the GC)."""

T = TypeVar("T")

CLOSE_POLICY: Final = 1008
CLOSE_TRY_AGAIN: Final = 1013
CLOSE_DOCUMENT_DELETED: Final = 4410
"""The document was deleted: in y-websocket's 4400-4499 range (3.1 and
later), which mirrors HTTP's 4xx (410 Gone), the provider does not
reconnect and emits ``closed`` with the code and reason. On a normal close
it reconnected at once and sent its copy, which created the document again.
(A Hocuspocus close message carries a reason only: its provider reconnects,
and its copy is refused with the same close, see the module docstring.)"""

RATE_RETRY_MIN_S: Final = 0.05
RATE_RETRY_MAX_S: Final = 1.0
"""How long an update over the token's rate limit waits before it asks again
(the 429's Retry-After, within these bounds: the limit is per sliding second)."""

EMPTY_STATE_VECTOR: Final = b"\x00"

WHOLE_UPDATE: Final = "yjs:update"
"""The shared form of a document: its whole update (what an empty state
vector lacks)."""

SHARED_MAX_LAG_OPS: Final = 1000
"""How many updates a shared whole document may be behind the document and
still be sent to a fresh provider, with a catch-up of the rest: a thousand
keystroke updates are tens of KB, little next to a document worth sharing,
and under a thousand updates/s a new encoding is made about once a second
instead of once per joiner."""


@dataclass(frozen=True)
class YjsContext:
    """What every Yjs connection uses, wired once by app.py."""

    auth: Authenticator
    engine: Engine
    hub: Hub
    service: CrdtService
    metrics: Metrics
    settings: Settings
    rooms: Rooms
    server: Callable[[], ServerContext | None]
    shared: SharedStates = field(default_factory=SharedStates)
    """The whole documents being sent to fresh providers, one per version."""


class Owner(Protocol):
    """The socket adapter a channel belongs to."""

    def send_message(self, channel: YjsChannel, message: bytes) -> None:
        """Frame and write one y-protocols message of ``channel``."""
        ...

    def send_delta(self, channel: YjsChannel, delta: EncodedDelta) -> None:
        """Write a document delta as an update message (shared framing)."""
        ...

    def send_shared(self, channel: YjsChannel, head: bytes, state: SharedState) -> None:
        """Frame and write one y-protocols message of ``channel``, ``head``
        followed by ``state``, a whole document other connections write too
        (never copied; what is sent meanwhile goes behind it)."""
        ...

    def close(self, code: int, reason: str = "") -> None: ...

    def close_document(self, channel: YjsChannel, code: int, reason: str) -> None:
        """End ``channel`` alone, for something about its document only (its
        deletion, an update or an awareness update of it refused): a socket of
        one document (y-websocket) closes with ``code``; a Hocuspocus socket
        closes that document and goes on with its others."""
        ...

    def update_started(self) -> None:
        """An update now awaits the store: the owner may stop reading."""
        ...

    def update_finished(self) -> None:
        """That update no longer awaits the store."""
        ...

    def update_done(self, channel: YjsChannel, applied: bool) -> None:
        """An update is durable (``applied``) or was refused (called before
        ``update_finished``); also called, without ``update_started``, for an
        update that carried nothing."""
        ...

    def read_only_update(self, channel: YjsChannel) -> None:
        """The peer sent an update on a read-only channel (it was dropped)."""
        ...

    def hold_reading(self, held: bool) -> None:
        """Stop reading (True) until each such call is matched by a False: an
        update, a step 1 or a query-awareness waits for the token's rate
        limit."""
        ...

    @property
    def write_paused(self) -> bool: ...


_UPDATE_BIT: Final = mask_bit(YDoc.TYPE, "update")


def may_write(auth: Authenticator, principal: Principal, crdt_id: str) -> bool:
    """Whether ``principal`` may send updates to the document (else read-only)."""
    try:
        auth.check_write(principal, crdt_id, YDoc.TYPE, _UPDATE_BIT)
    except ApiError:
        return False
    return True


def update_of(delta: dict[str, Any]) -> bytes:
    """The Yjs update a hub delta carries (empty for one that carries none)."""
    if delta.get("kind") == "snapshot":
        state = delta.get("state")
        return binascii.a2b_base64(state["update"]) if state else b""
    return binascii.a2b_base64(delta["op"]["update"])


class YjsChannel(DeliverEach):
    # One per document per connection: slots keep an idle connection small.
    __slots__ = (
        "_ctx",
        "_echo",
        "_lagged",
        "_left",
        "_missed_awareness",
        "_owner",
        "_relayed_awareness",
        "_resync_step1",
        "_step1s",
        "closed",
        "crdt_id",
        "ns",
        "origin",
        "principal",
        "room",
        "session",
        "told_read_only",
        "until",
    )

    def __init__(
        self,
        ctx: YjsContext,
        owner: Owner,
        ns: str,
        crdt_id: str,
        principal: Principal,
        *,
        writable: bool,
        origin: str | None = None,
        resync_step1: bool = False,
    ) -> None:
        self._ctx = ctx
        self._owner = owner
        self.ns = ns
        self.crdt_id = crdt_id
        self.principal = principal
        self.origin = origin
        """The connection's ``?origin=``: every update it sends carries it."""
        until = ctx.auth.read_ends(principal, crdt_id)
        self.until = NO_END_MS if until is None else until
        """When the read ends (wall-clock ms; NO_END_MS: never)."""
        self.session = YjsSession(self._do, owner, writable=writable)
        self._echo: dict[str, int] | None = None
        """Updates this peer sent that are not yet back from the hub: skipped
        (None while there is none: an idle channel keeps no dict)."""
        self._lagged = False
        self._missed_awareness: set[int] | None = None
        """The awareness clients whose changes were skipped while the peer
        lagged (None: none): their current states go out once it drains."""
        self._relayed_awareness = False
        """An awareness update of the peer's was relayed (the first is free)."""
        self._resync_step1 = resync_step1
        """Follow the answer to each step 1 of the peer but its first with our
        step 1 (Hocuspocus: see :meth:`_answer_step1`)."""
        self._step1s = 0
        self.closed = False
        """Nothing more goes out (the connection is closing)."""
        self._left = False
        self.told_read_only = False
        """The peer was told its updates are ignored (y-websocket says it once)."""
        self.room: Room = ctx.rooms.join(ns, crdt_id, self)
        ctx.hub.subscribe(ns, crdt_id, self)
        if ctx.auth.revocations.watch(principal, self):
            # Revoked between the check and now: closed once the owner is set up.
            asyncio.get_running_loop().call_soon(self.end_revoked)

    def start(self) -> None:
        """Our opening: step 1 and the room's awareness states (once the
        document is in memory: the hub subscription keeps it there)."""
        if self._resident():
            self.session.start(self._state_vector(), self.room.states())
            return
        # The peer's step 1 must be answered from the whole document: nothing
        # it sends is read until the document is in memory.
        self._owner.hold_reading(True)
        task = asyncio.get_running_loop().create_task(self._load_then_start())
        _loading.add(task)
        task.add_done_callback(_loading.discard)

    def reauthorize(self, principal: Principal, *, writable: bool) -> None:
        """Go on under ``principal``, a new token the peer authenticated with
        for this document (Hocuspocus): its scope, its read's end and its
        revocation from now on. Updates already received keep the token they
        came with."""
        revocations = self._ctx.auth.revocations
        revocations.unwatch(self.principal, self)
        self.principal = principal
        until = self._ctx.auth.read_ends(principal, self.crdt_id)
        self.until = NO_END_MS if until is None else until
        self.session.writable = writable
        self.told_read_only = False
        if revocations.watch(principal, self):
            asyncio.get_running_loop().call_soon(self.end_revoked)

    def receive(self, data: bytes | str) -> None:
        """A y-protocols message from the peer."""
        self.session.receive(data)

    async def _load_then_start(self) -> None:
        try:
            if await self._load() and not self.closed:
                self.session.start(self._state_vector(), self.room.states())
        finally:
            # Reading resumes after our opening: what the peer sent meanwhile
            # is handled now, in order.
            self._owner.hold_reading(False)

    def _resident(self) -> bool:
        """Whether the document is in memory, or need not be (a store that
        holds every CRDT in memory)."""
        ctx = self._ctx
        return (self.ns, self.crdt_id) in ctx.engine or not ctx.service.store.loads_on_demand

    async def _load(self) -> bool:
        """Read the document from the store into memory; False when it could
        not be (the connection is closed: 1013 while the store is unavailable,
        so the provider reconnects later)."""
        try:
            await self._ctx.service.ensure(self.ns, self.crdt_id)
        except ApiError as exc:
            log.warning("loading %s/%s for a Yjs peer: %s", self.ns, self.crdt_id, exc.message)
            if not self.closed:
                self._owner.close(CLOSE_TRY_AGAIN, "storage unavailable")
            return False
        except Exception:
            log.exception("loading %s/%s for a Yjs peer failed", self.ns, self.crdt_id)
            if not self.closed:
                self._owner.close(CLOSE_INTERNAL_ERROR, "internal error")
            return False
        return True

    def leave(self) -> None:
        """Leave the hub and the room (once; the connection is gone)."""
        self.closed = True
        if self._left:
            return
        self._left = True
        self._ctx.auth.revocations.unwatch(self.principal, self)
        self._ctx.hub.unsubscribe(self.ns, self.crdt_id, self)
        self._ctx.rooms.leave(self.ns, self.crdt_id, self)

    def end_revoked(self) -> None:
        """The token was revoked (the revocation table calls this): the whole
        connection closes, as at the token's expiry."""
        if not self._left:
            self._owner.close(CLOSE_TOKEN_EXPIRED, TOKEN_REVOKED_MESSAGE)

    def _document(self) -> YDoc | None:
        entry = self._ctx.engine.get(self.ns, self.crdt_id)
        if entry is None:
            return None
        crdt = entry.crdt
        assert isinstance(crdt, YDoc)
        return crdt

    def _state_vector(self) -> bytes:
        doc = self._document()
        return doc.state_vector() if doc is not None else EMPTY_STATE_VECTOR

    def drained(self) -> None:
        """The owner's socket drained: what was skipped meanwhile, as one update
        (the whole document), and the current awareness of the clients whose
        changes were skipped. The document is sent at once where what memory
        holds of it is durable (the common case); else from :meth:`_catch_up`."""
        missed = self._missed_awareness
        if missed is not None and not self.closed:
            self._missed_awareness = None
            states = self.room.states_of(missed)
            if states is not None:
                self._owner.send_message(self, awareness_message(states))
        if self._lagged and not self.closed:
            self._lagged = False
            if self._durable_in_memory():
                doc = self._document()
                if doc is not None:
                    self._send_whole(doc, SYNC_UPDATE)
                return
            task = asyncio.get_running_loop().create_task(self._catch_up())
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)

    async def _catch_up(self) -> None:
        """The whole document for a peer that lagged, where the document is not
        durable in memory: ops of it are in flight (waited for: a delta is
        sent only once durable, and so is the document), or it is not in
        memory at all, as after a failed write, which drops the documents
        memory holds ahead of the store (read first: skipping the catch-up
        left the peer without the updates skipped until its next step 1).
        1013 if the store cannot read it, so the provider reconnects and syncs
        by state vector."""
        update = await self._read_durable(self._whole_update, "catching a Yjs peer up")
        if update is not None and not self.closed:
            self._owner.send_message(self, sync_update(update))

    def _whole_update(self) -> bytes | None:
        doc = self._document()
        return None if doc is None else doc.diff(EMPTY_STATE_VECTOR)

    def _durable_in_memory(self) -> bool:
        """Whether what memory holds of the document may be sent now: it is in
        memory and the store holds it at memory's seq (no edit of it on its
        way to disk or into a commit), or it is not and need not be (a store
        that holds every CRDT in memory). One look at the store."""
        ctx = self._ctx
        store = ctx.service.store
        entry = ctx.engine.get(self.ns, self.crdt_id)
        if entry is None:
            return not store.loads_on_demand
        return store.holds(self.ns, self.crdt_id, entry.epoch, entry.seq)

    async def _read_durable(self, take: Callable[[], T], what: str) -> T | None:
        """``take()`` once what memory holds of the document is durable (read
        from the store first if need be: ``CrdtService.durable_read``); None if the
        channel closed first, or the store could not read it, which closes
        the connection (1013: the provider reconnects later and syncs by
        state vector)."""
        try:
            return await self._ctx.service.durable_read(self.ns, self.crdt_id, take, self._open)
        except ApiError as exc:
            log.warning("%s on %s/%s: %s", what, self.ns, self.crdt_id, exc.message)
            if not self.closed:
                self._owner.close(CLOSE_TRY_AGAIN, "storage unavailable")
        except Exception:
            log.exception("%s on %s/%s failed", what, self.ns, self.crdt_id)
            if not self.closed:
                self._owner.close(CLOSE_INTERNAL_ERROR, "internal error")
        return None

    def _open(self) -> bool:
        return not self.closed

    def _answer_step1(self, state_vector: bytes) -> None:
        """Answer the peer's step 1, each but the first counted against the
        token's rate limit as an update is (:meth:`_answer_counted`). Each
        answer may be the whole document, an encode of up to megabytes, so a
        peer repeating step 1 must not be free; backpressure only bounds it
        by how fast the peer reads.

        The first is free: it is the join, which the y-websocket upgrade or
        the Hocuspocus document's auth already counted (a joining provider
        would otherwise pay twice, and with a limit of 1 wait a second to
        sync). A new document on the socket is a new auth, counted."""
        self._step1s += 1
        if self._step1s == 1:
            self._reply_step1(state_vector, first=True)
            return
        self._answer_counted(lambda: self._reply_step1(state_vector, first=False), "a step 1")

    def _answer_query_awareness(self) -> None:
        """Answer the peer's query-awareness with every awareness state of
        the room, each query counted against the token's rate limit
        (:meth:`_answer_counted`): a message of one byte makes us encode and
        send up to :data:`~syncd.yjs.room.MAX_AWARENESS_CLIENTS` states of
        every connection in the room, an amplification nothing else bounds.

        None is free, unlike the first step 1: no provider needs one. Our
        opening already sends the room's states; y-websocket (3.x) sends its
        query only on its BroadcastChannel, never on the socket, and
        ``@hocuspocus/provider`` (3.x) never sends one. The states are those
        of the room when the answer goes out, not when the query came."""

        def answer() -> None:
            states = self.room.states()
            if states is not None:
                self._owner.send_message(self, awareness_message(states))

        self._answer_counted(answer, "a query-awareness")

    def _charge_awareness(self) -> None:
        """Count an awareness update the room relayed against the token's
        rate limit; over it, the socket is not read until the limit allows
        (:meth:`_answer_counted`), so a peer's updates are relayed at most
        about as often as the limit (one over it, at most, before the wait).
        Each is sent to every connection of the room and to the other
        nodes: uncounted, one token made the server fan out as many as it
        could send.

        Counted once relayed, not when read: providers send back every
        awareness change they are sent (y-websocket and
        ``@hocuspocus/provider`` alike, whatever its origin), and such an
        echo changes nothing and is not relayed; counted, it would charge
        every provider of a busy room for each cursor move of the others.
        The first is free, as the first step 1 is: a provider sends its
        state as it joins, which the upgrade or the auth paid for."""
        if not self._relayed_awareness:
            self._relayed_awareness = True
            return
        self._answer_counted(lambda: None, "an awareness update")

    def _answer_counted(self, answer: Callable[[], None], what: str) -> None:
        """Count a message that asks for an answer against the token's rate
        limit, then ``answer()`` it; over the limit, the answer waits and the
        socket is not read meanwhile, as an update waits. Not refused:
        y-websocket cannot be told to slow down, and Hocuspocus has no
        refusal for a sync or awareness message."""
        principal = self.principal
        try:
            self._ctx.auth.rate_check(principal)
        except ApiError as exc:
            if exc.status != 429:
                raise
            # Held before this message's handler returns, so nothing the
            # peer sent after it overtakes its answer.
            self._owner.hold_reading(True)
            task = asyncio.get_running_loop().create_task(
                self._answer_within_rate(answer, what, principal, exc)
            )
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)
            return
        answer()

    async def _answer_within_rate(
        self,
        answer: Callable[[], None],
        what: str,
        principal: Principal,
        refused: ApiError,
    ) -> None:
        """A message that met the rate limit: answered once it allows, as an
        update waits (:meth:`_within_rate`, the same bounds); reading stays
        held until then."""
        try:
            await asyncio.sleep(retry_after(refused))
            await self._within_rate(principal)
            if not self.closed:
                answer()
        except ApiError:
            pass  # only a 429 once the connection closes: nothing goes out
        except Exception:  # what the handler's own catch does for the message
            log.exception("answering %s of a Yjs peer failed", what)
            if not self.closed:
                self._owner.close(CLOSE_PROTOCOL_ERROR, "malformed y-websocket message")
        finally:
            self._owner.hold_reading(False)

    def _reply_step1(self, state_vector: bytes, *, first: bool) -> None:
        """Our step 2 to the peer's step 1; with ``resync_step1``, after the
        first, our step 1 behind it. A Hocuspocus provider's ``forceSync()``
        (and ``forceSyncInterval``) sends a step 1 and counts one unsynced
        change, which only the acknowledgement of its step 2 to our step 1
        takes back: Hocuspocus's server follows every step 2 with its step 1.
        The first needs none: our opening sent one.

        The document must be in memory, though the hub subscription keeps it
        there: a failed write drops the documents memory holds ahead of the
        store, and the rebuild after it forgets them all until they are read
        back. Answered from a document not read back yet, the peer would be
        told it is empty; the answer waits for the read instead, the socket
        not read meanwhile (as at the join).

        Nor is it answered from edits still on their way to disk or into a
        commit (docs/protocol.md, "Durability and ordering"): a step 2 with
        one whose write then fails gave the peer an edit the server forgot.
        While the document has such edits, the answer waits until they are
        durable, the socket not read meanwhile."""
        if not self._durable_in_memory():
            self._owner.hold_reading(True)
            task = asyncio.get_running_loop().create_task(
                self._reply_when_durable(state_vector, first)
            )
            _loading.add(task)
            task.add_done_callback(_loading.discard)
            return
        self._send_reply(state_vector, first=first)

    async def _reply_when_durable(self, state_vector: bytes, first: bool) -> None:
        try:
            messages = await self._read_durable(
                lambda: self._reply_messages(state_vector, first), "answering a Yjs step 1"
            )
            if messages is not None and not self.closed:
                for message in messages:
                    self._owner.send_message(self, message)
        finally:
            self._owner.hold_reading(False)

    def _reply_messages(self, state_vector: bytes, first: bool) -> list[bytes]:
        """What :meth:`_send_reply` sends, encoded now (not shared with other peers)."""
        doc = self._document()
        messages = [sync_step2(EMPTY_UPDATE if doc is None else doc.diff(state_vector))]
        if self._resync_step1 and not first:
            messages.append(sync_step1(self._state_vector()))
        return messages

    def _send_reply(self, state_vector: bytes, *, first: bool) -> None:
        self._send_diff(state_vector)
        if self._resync_step1 and not first and not self.closed:
            self._owner.send_message(self, sync_step1(self._state_vector()))

    def _send_diff(self, state_vector: bytes) -> None:
        """Answer a step 1: a step 2 with what ``state_vector`` lacks."""
        doc = self._document()
        if doc is None:
            self._owner.send_message(self, sync_step2(EMPTY_UPDATE))
        elif state_vector == EMPTY_STATE_VECTOR:
            self._send_whole(doc, SYNC_STEP2)
        else:
            self._owner.send_message(self, sync_step2(doc.diff(state_vector)))

    def _send_whole(self, doc: YDoc, step: int) -> None:
        """The whole document as a sync message of ``step``: shared with the
        other peers that are sent it (see the module docstring)."""
        entry = self._ctx.engine.get(self.ns, self.crdt_id)
        assert entry is not None  # _document() found it
        shared = self._ctx.shared
        catch_up: bytes | None = None
        update: bytes | SharedState
        hit = shared.recent(entry, WHOLE_UPDATE, SHARED_MAX_LAG_OPS)
        if hit is None:
            update = shared.keep(
                entry, WHOLE_UPDATE, doc.diff(EMPTY_STATE_VECTOR), doc.state_vector()
            )
        else:
            update, seq, state_vector = hit
            if seq != entry.seq:
                catch_up = doc.diff(state_vector)
        owner = self._owner
        if isinstance(update, SharedState):
            owner.send_shared(self, sync_head(step, len(update)), update)
        else:
            owner.send_message(self, sync_head(step, len(update)) + update)
        if catch_up is not None:
            owner.send_message(self, sync_update(catch_up))

    # -- the hub ---------------------------------------------------------------

    def deliver(self, delta: EncodedDelta) -> None:
        if self.closed:
            return
        data = delta.delta
        if data.get("kind") == "deleted":
            self._owner.close_document(self, CLOSE_DOCUMENT_DELETED, "document deleted")
            return
        if data.get("kind") == "op":
            if data.get("ts", 0) >= self.until:
                return  # made after the read ended; the owner's expiry timer closes us
            echo = self._echo
            if echo is not None:
                update = data["op"]["update"]
                pending = echo.get(update)
                if pending is not None:
                    if pending != 1:
                        echo[update] = pending - 1
                    elif len(echo) == 1:
                        self._echo = None
                    else:
                        del echo[update]
                    return
        if self._owner.write_paused:
            self._lagged = True
            return
        self._owner.send_delta(self, delta)

    # -- the room ------------------------------------------------------------

    def send_awareness(self, update: bytes, clients: Collection[int]) -> None:
        """Relay a room's awareness update; while the peer lags, note its
        ``clients`` instead, whose states it is sent once it drains (as a
        y-websocket server would have delivered every update): skipped and
        forgotten, the peer kept stale cursors, removed ones included, until
        each client renewed its state (up to 30 s)."""
        if self.closed:
            return
        if not self._owner.write_paused:
            self._owner.send_message(self, awareness_message(update))
            return
        missed = self._missed_awareness
        if missed is None:
            missed = self._missed_awareness = set()
        missed.update(clients)
        known = self.room.awareness.meta
        if len(missed) > 2 * len(known) + MAX_AWARENESS_UPDATE_CLIENTS:
            # Bounded by what the room knows: clients it forgot cannot be
            # sent (pruned seldom enough to cost O(1) per client).
            missed.intersection_update(known)

    # -- the session's actions ---------------------------------------------

    def _do(self, action: Action) -> None:
        owner = self._owner
        if isinstance(action, Send):
            owner.send_message(self, action.data)
        elif isinstance(action, SendDiff):
            self._answer_step1(action.state_vector)
        elif isinstance(action, ApplyUpdate):
            if action.answer and self._brings_nothing(action.update):
                owner.update_done(self, True)  # up to date: nothing to write
            else:
                self._apply(action.update)
        elif isinstance(action, RelayAwareness):
            try:
                relayed = self.room.apply(self, action.update)
            except AwarenessRefused as exc:
                owner.close_document(self, CLOSE_POLICY, str(exc))
            else:
                if relayed:
                    self._charge_awareness()
        elif isinstance(action, SendAwareness):
            self._answer_query_awareness()
        elif isinstance(action, ReadOnlyUpdate):
            if action.answer and self._brings_nothing(action.update):
                owner.update_done(self, True)  # up to date: nothing was refused
            else:
                owner.read_only_update(self)
        elif isinstance(action, EmptyUpdate):
            owner.update_done(self, True)  # nothing to apply: done at once
        else:
            raise TypeError(f"not a Yjs channel action: {action!r}")

    def _brings_nothing(self, update: bytes) -> bool:
        """Whether the peer's step 2 brings nothing the document lacks: no
        item past its state vector, no deletion it has not made (what
        Hocuspocus's server checks, ``Y.snapshotContainsUpdate``). A provider
        that reconnects with nothing new sends such a step 2 (its whole delete
        set): written, it would be one more op per reconnect, under its name.

        Yrs does the work: the update less what the state vector covers has no
        items when its first var-uint (clients with items) is 0, and its
        delete set is within the document's when merging it into the
        document's (``diff`` by the document's own state vector: its delete
        set alone) changes nothing; in practice the two are byte-equal."""
        doc = self._document()
        if doc is None or len(update) > MAX_UPDATE_BYTES:
            return False
        if ydoc_nesting.too_deep(update):
            return False  # Yrs would decode it past its stack: the usual path refuses it
        state_vector = doc.state_vector()
        try:
            rest = get_update(update, state_vector)
            if rest[:1] != b"\x00":
                return False  # items the document lacks
            have = doc.diff(state_vector)
            return rest == have or merge_updates(have, rest) == have
        except BaseException as exc:  # Yrs on peer bytes (pyo3 panics too)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return False  # the usual path refuses it

    def _apply(self, update: bytes) -> None:
        try:
            self._ctx.auth.check_expiry(self.principal)
        except ApiError as exc:
            self._refused(exc)
            return
        text = binascii.b2a_base64(update, newline=False).decode("ascii")
        echo = self._echo
        if echo is None:
            echo = self._echo = {}
        echo[text] = echo.get(text, 0) + 1
        self._owner.update_started()
        task = asyncio.get_running_loop().create_task(self._commit(text, update, self.principal))
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    async def _commit(self, text: str, update: bytes, principal: Principal) -> None:
        ctx = self._ctx
        body = {"op": "update", "update": text}
        if self.origin is not None:
            body["origin"] = self.origin
        applied = False
        try:
            await self._within_rate(principal)
            if not await self._read_nesting(update):
                self._forget_echo(text)
                if not self.closed:
                    self._owner.close_document(self, CLOSE_DOCUMENT_DELETED, "document deleted")
                return
            await ctx.service.apply_ops(self.ns, self.crdt_id, body, principal, "yjs")
            applied = True
        except ApiError as exc:
            self._forget_echo(text)
            if not self.closed:
                # A channel closed meanwhile (its Hocuspocus document closed,
                # or its new token refused) drops the update with it; closing
                # the socket would end the socket's other documents too.
                self._refused(exc)
        except Exception:
            self._forget_echo(text)
            log.exception("applying a Yjs update failed")
            self._owner.close(CLOSE_INTERNAL_ERROR, "internal error")
        finally:
            # The acknowledgement first: finishing may resume reading, and
            # what that handles at once must not overtake it.
            self._owner.update_done(self, applied)
            self._owner.update_finished()

    async def _read_nesting(self, update: bytes) -> bool:
        """The document's type depths read in a thread when not known (the
        first write since it was loaded) and it is large: read at the write,
        on the event loop, they held every connection for up to a second
        (:meth:`YDoc.read_nesting`).

        False when ``update`` must not be written: the document does not
        exist, and the update is a stale editor's copy of it as this node
        deleted it lately (:class:`~syncd.crdt.ydoc.DeletedYDocs`), which
        would create it again. Where the document exists, what is
        remembered of its deletion no longer matters (an HTTP write, or a
        fresh editor, created it again) and is forgotten."""
        ctx = self._ctx
        entry = ctx.engine.get(self.ns, self.crdt_id)
        if entry is None and ctx.service.store.loads_on_demand:
            entry = await ctx.service.ensure(self.ns, self.crdt_id)
        deleted = ctx.service.deleted_ydocs
        if entry is None:
            return not deleted.brings_back(self.ns, self.crdt_id, update)
        if deleted:
            deleted.forget(self.ns, self.crdt_id)
        if isinstance(entry.crdt, YDoc):
            await entry.crdt.read_nesting()
        return True

    async def _within_rate(self, principal: Principal) -> None:
        """Count the update against the token's rate limit; over it, wait."""
        auth = self._ctx.auth
        held = False
        try:
            while True:
                try:
                    auth.rate_check(principal)
                    return
                except ApiError as exc:
                    if exc.status != 429 or self.closed:
                        raise
                    if not held:
                        # Not read until this update is admitted: what the
                        # peer sends meanwhile would only wait behind it.
                        held = True
                        self._owner.hold_reading(True)
                    await asyncio.sleep(retry_after(exc))
        finally:
            if held:
                self._owner.hold_reading(False)

    def _forget_echo(self, text: str) -> None:
        echo = self._echo
        if echo is None:
            return
        pending = echo.get(text, 0)
        if pending > 1:
            echo[text] = pending - 1
            return
        echo.pop(text, None)
        if not echo:
            self._echo = None

    def _refused(self, exc: ApiError) -> None:
        """Close for a refused update: the document alone when the refusal is
        about it (malformed, too large, over a quota, a permission of it);
        the whole connection for an ended token (as at its expiry) or a
        store that is unavailable (every document of it is)."""
        reason = f"{exc.code}: {exc.message}"[:120]
        if exc.code in ("token_expired", "token_revoked"):
            self._owner.close(CLOSE_TOKEN_EXPIRED, reason)
        elif exc.status in (400, 413):
            self._owner.close_document(self, CLOSE_BAD_DATA, reason)
        elif exc.status in (401, 403):
            self._owner.close_document(self, CLOSE_POLICY, reason)
        else:
            self._owner.close(CLOSE_TRY_AGAIN, reason)


def retry_after(exc: ApiError) -> float:
    """How long to wait before asking again after a 429 (its Retry-After,
    within :data:`RATE_RETRY_MIN_S` and :data:`RATE_RETRY_MAX_S`)."""
    for name, value in exc.headers:
        if name.lower() == "retry-after":
            try:
                return min(max(float(value), RATE_RETRY_MIN_S), RATE_RETRY_MAX_S)
            except ValueError:
                break
    return RATE_RETRY_MIN_S


_tasks: set[asyncio.Task[None]] = set()
"""Update tasks nobody else references (the loop holds tasks weakly)."""
