"""The native WebSocket protocol of one connection, without I/O: bytes in, actions out.

Theory of operation
-------------------
A :class:`Session` is the native protocol (docs/protocol.md#the-websocket) on
the :class:`~syncd.ws.base_session.BaseSession` every WebSocket runs on, which
owns the frames, keepalive, the close handshake and read backpressure. The
connection adapter (:mod:`syncd.ws.connection`) feeds it what happened (bytes
read, the clock, the transport's backpressure, an op's outcome) and carries
out the actions the session hands to the injected ``emit`` callable, in the
order given: the base session's (``Send``, ``PauseReading``,
``ResumeReading``, ``Close``, ``Finish``), and the protocol's own:

- :class:`Apply`: client ops to apply (in arrival order); each
  :class:`StagedOp` is answered through :meth:`Session.ack`,
  :meth:`Session.fail` or :meth:`Session.drop`, then the adapter calls
  :meth:`Session.answers_ready`;
- :class:`Subscribe` / :class:`Unsubscribe`: join or leave the hub for a CRDT
  (the adapter owns the subscriptions: they write to its socket).

Messages (docs/protocol.md#the-websocket): ``op`` (token expiry and rate
checked at once, the op staged and applied with the rest of the read's ops,
answered with ``ack`` or ``error``), ``subscribe`` (token expiry, rate as for
an op, read permission, at most ``max_subscriptions``; subscribing again
starts afresh), ``unsubscribe`` (free),
``ping`` (``pong``). Protocol-level pings are answered by the frame layer.
Answers go out strictly in arrival order, each once its own op is durable:
replies owed after a still-running op wait behind it. Replies use the
encoding of the message they answer (binary msgpack or JSON text); a malformed
message gets an ``error`` reply and the connection stays up. A message over
the body limit closes with 1009, a protocol violation with 1002. Reading
stops while :data:`MAX_INFLIGHT_OPS` messages await their outcome: op
messages, subscriptions whose start waits for the store (the adapter counts
them with :meth:`started` and :meth:`settled`), and the replies to other
messages queued behind an op.

Expiry (:meth:`Session.expire`, called by the adapter's expiry timer at
:attr:`Session.expiry_due`, the token's expiry or, earlier, the end of the
rules that grant a subscription's read): each subscription whose read has
ended gets an ``error`` naming it (``token_expired``, or ``forbidden`` when
only its rule expired) and ends. Once the token has expired the connection
can do nothing more: it closes with :data:`CLOSE_TOKEN_EXPIRED`, after the
answers still owed to ops sent before. The clock decides, not the timer: a
timer that fires early ends nothing.

Revocation (:meth:`Session.revoke`, called when an admin revokes the token,
docs/permissions.md#revoking-tokens) ends the connection the same way as the
token's expiry: every subscription gets ``token_revoked``, then the close
(:data:`CLOSE_TOKEN_EXPIRED`, reason ``token revoked``) after the answers owed.

Disconnect: each CRDT whose type declares a ``DISCONNECT_OP`` (presence:
``leave``) and that this connection wrote with another op is returned by
:meth:`Session.disconnect_ops_stamped`, with the life (epoch) it last wrote
in and the stamp that write carried, which the adapter asks once the
connection is lost and its in-flight ops are done, to send them on the
connection's behalf (only while that life lasts: a CRDT deleted meanwhile
holds nothing of ours to leave; and only while the entry is the one we wrote:
another connection of the same client, which shares the entry, may have
written it since). Noting the stamp costs the op path a dict lookup; the
comparison happens only at disconnect.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, cast

from syncd.auth.authenticator import TOKEN_EXPIRED_MESSAGE, token_expired
from syncd.auth.revocations import TOKEN_REVOKED_MESSAGE, token_revoked
from syncd.crdt.types import check_ops_named, crdt_class, with_type_list
from syncd.crdt.validate import check_origin, with_origin
from syncd.errors import ApiError, bad_request
from syncd.ids import check_crdt_id
from syncd.ws.base_session import Action, BaseSession, Send
from syncd.ws.codec import MessageLimits, decode, encode
from syncd.ws.framing import CLOSE_TOKEN_EXPIRED

if TYPE_CHECKING:
    from syncd.auth.authenticator import Authenticator, Principal
    from syncd.crdt.engine import ApplyResult

MAX_INFLIGHT_OPS: Final = 1024
"""Messages one connection may have awaiting their outcome (op messages,
subscriptions whose start waits for the store, replies queued behind a
still-running op); past it we stop reading. Enough to fill many group commits
when a client pipelines, while the memory of what waits stays bounded: a
client that sent pings behind one op waiting for a slow commit made us queue a
reply for each, and subscribe/unsubscribe pairs while loads were slow a task
each, with reading never paused."""

RESUME_INFLIGHT_OPS: Final = MAX_INFLIGHT_OPS // 2
"""Reading resumes once this few remain, so it does not flap per op."""

_PONG: Final = {"kind": "pong"}


@lru_cache(maxsize=4)
def _limits(max_bytes: int, max_depth: int) -> MessageLimits:
    """One MessageLimits for every session with these settings (they are
    the server's, so all of them), not an object each."""
    return MessageLimits(max_bytes, max_depth)


_INTERNAL: Final = ApiError(500, "internal", "internal error")

_Owed = tuple[str | None, int | None, Mapping[str, Any]]
"""What a connection owes a CRDT when it goes away: (the epoch it last wrote
the CRDT in, the stamp that write carried, the disconnect op)."""


# -- actions (the protocol's own; the base session's are in base_session) ----


class Apply(Action):
    __slots__ = ("run",)

    def __init__(self, run: list[StagedOp]) -> None:
        self.run = run


class Subscribe(Action):
    __slots__ = ("binary", "crdt_id", "epoch", "since", "until")

    def __init__(
        self,
        crdt_id: str,
        since: int | None,
        epoch: str | None,
        binary: bool,
        until: int | None = None,
    ) -> None:
        self.crdt_id = crdt_id
        self.since = since
        """None: start from a snapshot; else replay what came after it."""
        self.epoch = epoch
        self.binary = binary
        self.until = until
        """When the read ends (wall-clock ms; None: never): the subscription
        sends no delta of an op made from then on, whatever the timer does."""


class Unsubscribe(Action):
    __slots__ = ("crdt_id",)

    def __init__(self, crdt_id: str) -> None:
        self.crdt_id = crdt_id


# -- replies -----------------------------------------------------------------


def error_message(ref: Any, exc: ApiError, crdt_id: str | None = None) -> dict[str, Any]:
    """The ``error`` reply for ``exc``; ``ref`` and ``id`` when known."""
    message: dict[str, Any] = {"kind": "error"}
    if ref is not None:
        message["ref"] = ref
    if crdt_id is not None:
        message["id"] = crdt_id
    exc = with_type_list(exc)
    message["error"] = exc.code
    message["message"] = exc.message
    for name, value in exc.headers:
        if name.lower() == "retry-after" and value.isascii() and value.isdigit():
            message["retry_after"] = int(value)
    return message


def _ref_of(message: dict[str, Any]) -> Any:
    ref = message.get("ref")
    return ref if type(ref) is str or type(ref) is int else None


def _id_field(message: dict[str, Any]) -> str:
    crdt_id = message.get("id")
    if type(crdt_id) is not str:
        raise bad_request("id: a CRDT id string is required")
    return check_crdt_id(crdt_id)


class StagedOp:
    """One op message, waiting to be applied and then for its answer to go out."""

    __slots__ = ("binary", "body", "crdt_id", "data", "ref")

    def __init__(self, crdt_id: str, body: Any, ref: Any, binary: bool) -> None:
        self.crdt_id = crdt_id
        self.body = body
        self.ref = ref
        self.binary = binary
        self.data: bytes | None = None
        """The encoded answer once known; b"" when none is owed (cancelled)."""


# -- the session -------------------------------------------------------------


class Session(BaseSession):
    __slots__ = (
        "_auth",
        "_close_reason",
        "_close_when_answered",
        "_disconnect_ops",
        "_limits",
        "_max_subscriptions",
        "_read_ends",
        "_replies",
        "_run",
        "expired",
        "principal",
        "subscribed",
    )

    def __init__(
        self,
        emit: Callable[[Action], None],
        auth: Authenticator,
        principal: Principal,
        *,
        max_message_bytes: int,
        json_max_depth: int,
        max_subscriptions: int,
        ping_s: float,
        now: float,
    ) -> None:
        super().__init__(
            emit,
            self,
            max_message_bytes=max_message_bytes,
            ping_s=ping_s,
            now=now,
            max_inflight=MAX_INFLIGHT_OPS,
            resume_inflight=RESUME_INFLIGHT_OPS,
        )
        self._auth = auth
        self.principal = principal
        self._limits = _limits(max_message_bytes, json_max_depth)
        self._max_subscriptions = max_subscriptions
        self.subscribed: dict[str, bool] = {}
        """CRDT id -> whether its deltas go out binary (msgpack) or as JSON."""
        self._read_ends: dict[str, int] | None = None
        """CRDT id -> when its read ends, for subscriptions whose rules expire
        before the token does (the others end with the token); None while
        there is none, as this and the next are for most connections."""
        self.expired = False
        """The token has expired: every subscription has ended."""
        self._close_when_answered = False
        """Close (token expired or revoked) once the answers still owed have gone out."""
        self._close_reason = TOKEN_EXPIRED_MESSAGE
        """Why the token ended: the reason of that close."""
        self._replies: deque[bytes | StagedOp] | None = None
        """Answers owed, in arrival order: ready bytes, or ops still running.
        None while none is owed: a deque is ~760 bytes, and an idle connection
        owes nothing."""
        self._run: list[StagedOp] | None = None
        """Op messages of the current read, applied together (None: none yet)."""
        self._disconnect_ops: dict[str, _Owed] | None = None
        """CRDT id -> (the epoch we last wrote it in, the stamp that write
        carried (presence's, None when the record has none), the op to send
        for it when this connection goes away) (None: none)."""

    @property
    def expiry_due(self) -> int | None:
        """When (wall-clock ms, the authenticator's clock) the adapter's expiry
        timer should call :meth:`expire`: the token's expiry or, earlier, the
        end of a subscription's read. None: nothing to time."""
        if self.closing or self.expired:
            return None
        due = self.principal.expires_at
        ends = self._read_ends
        if ends:
            first = min(ends.values())
            if due is None or first < due:
                due = first
        return due

    # -- input ---------------------------------------------------------------

    def process(self) -> None:
        """Handle what is buffered, as far as backpressure allows; the read's
        ops go out as one :class:`Apply`."""
        if not self.handling:
            return
        try:
            self._read_events()
        finally:
            run = self._run
            if run:
                self._run = None
                self._emit(Apply(run))

    def connection_lost(self) -> None:
        """The connection is gone: nothing more goes out. Idempotent."""
        super().connection_lost()
        self.subscribed.clear()
        self._read_ends = None
        self._replies = None

    @property
    def may_have_disconnect_ops(self) -> bool:
        """False when no op of this connection (done or pending) can have
        left a disconnect op to send."""
        return bool(self._disconnect_ops)

    def disconnect_ops_stamped(
        self,
    ) -> list[tuple[str, str | None, int | None, Mapping[str, Any]]]:
        """(CRDT id, the epoch we wrote it in, the stamp our last write
        carried, op) to send on the lost connection's behalf, once each, while
        that epoch lasts and, when the stamp is known, while the entry is
        still the one we wrote (another connection of the same client may
        have written it since)."""
        ops = self._disconnect_ops
        self._disconnect_ops = None
        if not ops:
            return []
        return [(crdt_id, epoch, stamp, op) for crdt_id, (epoch, stamp, op) in sorted(ops.items())]

    def owed(self, crdt_id: str, body: Any) -> tuple[str | None, int | None] | None:
        """(the epoch, the stamp) of the disconnect op this connection owes
        ``crdt_id``, when ``body`` is that op alone (presence's explicit
        ``leave``, sent ahead of the close); None otherwise."""
        ops = self._disconnect_ops
        owed = ops.get(crdt_id) if ops else None
        if owed is None or type(body) is not dict or body.get("op") != owed[2]["op"]:
            return None
        return owed[0], owed[1]

    def disconnect_ops(self) -> list[tuple[str, str | None, Mapping[str, Any]]]:
        """:meth:`disconnect_ops_stamped` without the stamps."""
        return [(crdt_id, epoch, op) for crdt_id, epoch, _, op in self.disconnect_ops_stamped()]

    # -- expiry and revocation -------------------------------------------------

    def expire(self) -> None:
        """The expiry timer fired: end each subscription whose read has ended,
        by the clock; close once the token itself has expired."""
        if self._gone or self.closing or self.expired:
            return
        auth = self._auth
        principal = self.principal
        now = auth.now_ms()
        expires_at = principal.expires_at
        if expires_at is not None and now >= expires_at:
            self._end_token(token_expired, TOKEN_EXPIRED_MESSAGE)
            return
        ends = self._read_ends or {}
        ended = [crdt_id for crdt_id, until in ends.items() if until <= now]
        for crdt_id in ended:
            self._end_subscription(crdt_id, auth.read_ended(principal, crdt_id))

    def revoke(self) -> None:
        """The token was revoked: end every subscription and close."""
        if self._gone or self.closing or self.expired:
            return
        self._end_token(token_revoked, TOKEN_REVOKED_MESSAGE)

    def _end_token(self, error: Callable[[], ApiError], reason: str) -> None:
        """The token is no longer good: every subscription ends with ``error``,
        then the connection closes (after the answers still owed)."""
        self.expired = True
        self._close_reason = reason
        for crdt_id in list(self.subscribed):
            self._end_subscription(crdt_id, error())
        if self._replies:
            self._close_when_answered = True
        else:
            self.close(CLOSE_TOKEN_EXPIRED, reason)

    def _end_subscription(self, crdt_id: str, exc: ApiError) -> None:
        binary = self.subscribed.pop(crdt_id)
        self._forget_read_end(crdt_id)
        self._emit(Unsubscribe(crdt_id))
        # Not an answer to a message: out at once, as deltas go, rather
        # than behind the acks still owed.
        self._emit(Send(encode(error_message(None, exc, crdt_id), binary)))

    # -- answers ---------------------------------------------------------------

    def ack(self, staged: StagedOp, result: ApplyResult) -> None:
        """``staged`` is applied and durable: answered with the fields
        ``POST …/ops`` answers (``applied`` too, so a batch's count is known)."""
        ack: dict[str, Any] = {
            "kind": "ack",
            "ref": staged.ref,
            "seq": result.seq,
            "applied": result.applied,
        }
        if result.extra:
            ack.update(result.extra)
        if result.duplicate:
            ack["duplicate"] = True
        staged.data = encode(ack, staged.binary)
        self._note_disconnect_op(staged.crdt_id, result)

    @staticmethod
    def fail(staged: StagedOp, exc: ApiError | None) -> None:
        """``staged`` was refused with ``exc`` (None: an internal error, logged)."""
        staged.data = encode(error_message(staged.ref, exc or _INTERNAL), staged.binary)

    @staticmethod
    def drop(staged: StagedOp) -> None:
        """No answer is owed for ``staged`` (the loop is going away under it)."""
        if staged.data is None:
            staged.data = b""

    def answers_ready(self) -> None:
        """Ops of an :class:`Apply` were answered: send what is now in order."""
        replies = self._replies
        out: list[bytes] = []
        while replies:
            head = replies[0]
            if type(head) is bytes:
                self.inflight -= 1
                out.append(head)
            else:
                data = cast(StagedOp, head).data
                if data is None:
                    break
                self.inflight -= 1
                out.append(data)
            replies.popleft()
        if replies is not None and not replies:
            self._replies = None  # all answered: give the queue back
        if out:
            # One write for a run of answers: pipelined acks cost one send.
            self._emit(Send(out[0] if len(out) == 1 else b"".join(out)))
        if self._close_when_answered and not replies:
            self._close_when_answered = False
            self.close(CLOSE_TOKEN_EXPIRED, self._close_reason)
            return
        self._resume_if_due()

    def subscription_failed(self, crdt_id: str, exc: ApiError, binary: bool) -> None:
        """The adapter could not start a subscription (its replay failed)."""
        self.subscribed.pop(crdt_id, None)
        self._forget_read_end(crdt_id)
        self._reply(encode(error_message(None, exc, crdt_id), binary))

    # -- internals ---------------------------------------------------------------

    def on_message(self, data: bytes | str) -> None:
        """One whole message (the base session's receiver is the session itself)."""
        binary = type(data) is bytes
        try:
            message = decode(data, self._limits)
        except ApiError as exc:
            self._reply(encode(error_message(None, exc), binary))
            return
        kind = message.get("kind")
        try:
            if kind == "op":
                self._on_op(message, binary)
            elif kind == "subscribe":
                self._on_subscribe(message, binary)
            elif kind == "unsubscribe":
                self._on_unsubscribe(_id_field(message))
            elif kind == "ping":
                ref = _ref_of(message)
                self._reply(encode(_PONG if ref is None else {"kind": "pong", "ref": ref}, binary))
            else:
                raise bad_request(f"kind: {kind!r} is not one of op, subscribe, unsubscribe, ping")
        except ApiError as exc:
            about = message.get("id") if kind == "subscribe" else None
            self._reply(
                encode(
                    error_message(_ref_of(message), exc, about if type(about) is str else None),
                    binary,
                )
            )

    def _on_op(self, message: dict[str, Any], binary: bool) -> None:
        ref = message.get("ref")
        if type(ref) is not str and type(ref) is not int:
            raise bad_request("ref: a string or integer is required")
        crdt_id = _id_field(message)
        if "op" not in message:
            raise bad_request("op: an op object or an array of ops is required")
        body = message["op"]
        check_ops_named(crdt_id, body)
        origin = message.get("origin")
        if origin is not None:
            # The message's origin: on every op that names none of its own.
            body = with_origin(body, check_origin(origin, error=bad_request))
        auth = self._auth
        auth.check_expiry(self.principal)
        auth.rate_check(self.principal)
        staged = StagedOp(crdt_id, body, ref, binary)
        replies = self._replies
        if replies is None:
            replies = self._replies = deque()
        replies.append(staged)
        self.inflight += 1
        run = self._run
        if run is None:
            run = self._run = []
        run.append(staged)

    def _on_subscribe(self, message: dict[str, Any], binary: bool) -> None:
        crdt_id = _id_field(message)
        since = message.get("since")
        if since is not None and (type(since) is not int or since < 0):
            raise bad_request("since: must be a non-negative integer")
        epoch = message.get("epoch")
        if epoch is not None and type(epoch) is not str:
            raise bad_request("epoch: must be a string")
        auth = self._auth
        principal = self.principal
        auth.check_expiry(principal)
        # Counted as an op is: each subscribe sends the CRDT's whole state
        # (and may load it from the store), so a subscribe/unsubscribe loop
        # must not be free. Refused here, an existing subscription to the id
        # goes on untouched.
        auth.rate_check(principal)
        auth.check_read(principal, crdt_id)
        if crdt_id in self.subscribed:
            self._on_unsubscribe(crdt_id)  # subscribing again starts afresh
        elif len(self.subscribed) >= self._max_subscriptions:
            raise bad_request(f"at most {self._max_subscriptions} subscriptions per connection")
        until = auth.read_ends(principal, crdt_id)
        expires_at = principal.expires_at
        if until is not None and (expires_at is None or until < expires_at):
            if self._read_ends is None:
                self._read_ends = {}
            self._read_ends[crdt_id] = until
        self.subscribed[crdt_id] = binary
        self._emit(Subscribe(crdt_id, since, epoch, binary, until))

    def _on_unsubscribe(self, crdt_id: str) -> None:
        if crdt_id in self.subscribed:
            del self.subscribed[crdt_id]
            self._forget_read_end(crdt_id)
            self._emit(Unsubscribe(crdt_id))

    def _note_disconnect_op(self, crdt_id: str, result: ApplyResult) -> None:
        """Remember the CRDTs whose type wants an op from this connection when
        it goes away (``Crdt.DISCONNECT_OP``: presence's leave)."""
        for record in result.records:
            on_disconnect = crdt_class(record["type"]).DISCONNECT_OP
            if on_disconnect is None:
                return
            ops = self._disconnect_ops
            if record["op"].get("op") == on_disconnect["op"]:
                if ops is not None:
                    ops.pop(crdt_id, None)
            else:
                if ops is None:
                    ops = self._disconnect_ops = {}
                ops[crdt_id] = (record.get("epoch"), record["op"].get("stamp"), on_disconnect)

    def _forget_read_end(self, crdt_id: str) -> None:
        ends = self._read_ends
        if ends is not None:
            ends.pop(crdt_id, None)
            if not ends:
                self._read_ends = None

    def _reply(self, data: bytes) -> None:
        replies = self._replies
        if replies:
            replies.append(data)  # after the answers still owed
            self.inflight += 1  # counts against MAX_INFLIGHT_OPS until it goes out
        else:
            self._emit(Send(data))
