"""A client-side replica: a local copy of one CRDT, kept current by deltas.

The replica is built from the snapshot's mergeable state with the service's
own CRDT types (``crdt_class(type).from_state(state)``) and applies each op
delta with ``apply_delta``, so a replica holding the snapshot at seq N and the
op deltas N+1, N+2, ... has exactly the service's state (docs/protocol.md#deltas). The
application reads locally (``replica.value``) and hears of every change
through callbacks (``on_change``) or an async iterator (``changes()``).

:meth:`Replica.apply` is pure (no I/O) and usable with any source of deltas;
:meth:`Replica.follow` wires it to a resuming subscription (WebSocket or SSE),
which already skips repeats and resubscribes across gaps, so the replica only
ever sees a whole history. An op delta that does not follow on anyway is
refused (``apply`` returns False) rather than applied out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final, Protocol

from syncd.client.errors import ClientError, EpochChangedError
from syncd.client.stream import EventStream, Subscription
from syncd.client.token import wall_clock_ms
from syncd.crdt.base import Crdt
from syncd.crdt.engine import replica_state
from syncd.crdt.types import crdt_class, type_for_id

log = logging.getLogger("syncd.client")

Delta = dict[str, Any]


class ReplicaSource(Protocol):
    """Where a replica's deltas come from (``AsyncClient``)."""

    def subscribe(self, ids: Iterable[str], **options: Any) -> Subscription: ...

    def events(self, crdt_id: str, **options: Any) -> EventStream: ...


ChangeCallback = Callable[["Replica", Delta], None]

CHANGES_BUFFER: Final = 10_000
"""Changes an async iterator of :meth:`Replica.changes` may hold unread; a
reader further behind gets :class:`ReplicaLagError` (the replica itself stays
current: the reader can read ``value`` and carry on with a new iterator)."""


ENDED_LIVES_KEPT: Final = 64
"""Epochs of the lives a replica saw end that it remembers, so a
:meth:`Replica.wait_for_seq` in one of them fails at once: far more than the
deletes a wait can meet; a life older still is waited for until the timeout
(it is not known to be over, as a life the replica has not reached yet is not)."""


def _copy(value: Any) -> Any:
    """A copy of a JSON value the caller may change: its lists and dicts anew,
    its strings, numbers and the like shared (they cannot change). Cheaper
    than ``copy.deepcopy``, which keeps a memo of every object it meets."""
    kind = type(value)
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_copy(item) for item in value]
    return value


class ReplicaLagError(ClientError):
    """A :meth:`Replica.changes` reader fell more than its buffer behind."""


class Changes:
    """An async iterator of the deltas a replica applies from its creation on
    (registered at once, so no change between creation and first read is lost)."""

    def __init__(self, replica: Replica, limit: int) -> None:
        self._replica = replica
        self._items: deque[Delta] = deque()
        self._limit = limit
        self._wake = asyncio.Event()
        self._overflow = False
        self._done = False
        self._error: BaseException | None = None

    def push(self, delta: Delta) -> None:
        if len(self._items) >= self._limit:
            self._overflow = True
        else:
            self._items.append(delta)
        self._wake.set()

    def finish(self, error: BaseException | None) -> None:
        self._done = True
        self._error = error
        self._wake.set()

    def __aiter__(self) -> Changes:
        return self

    async def __anext__(self) -> Delta:
        while True:
            if self._items:
                return self._items.popleft()
            if self._overflow:
                self.close()
                raise ReplicaLagError(
                    f"replica {self._replica.id}: more than {self._limit} unread changes"
                )
            if self._done:
                self.close()
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    def close(self) -> None:
        """Stop receiving changes."""
        self._replica._feeds.discard(self)


class _SeqWait:
    """One :meth:`Replica.wait_for_seq`: judged at every applied delta, so a
    life that ends between two reads of the waiter is not missed."""

    def __init__(self, seq: int, life: str | None, takes_first_life: bool) -> None:
        self.seq = seq
        self.life = life
        """The epoch waited in; None until the CRDT has one (see below)."""
        self.takes_first_life = takes_first_life
        """No epoch was given and the replica had none at the call (the CRDT
        did not exist for it): the first life it sees is the one waited in."""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settle(self, error: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(error)


class Replica:
    def __init__(
        self,
        crdt_id: str,
        type_name: str | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.id = crdt_id
        self.type: str | None = type_name or type_for_id(crdt_id)
        if self.type is not None:
            crdt_class(self.type)  # unknown type names fail here, not at the first delta
        self.seq = 0
        self.epoch: str | None = None
        self.crdt: Crdt | None = None
        """The local CRDT; None while the id does not exist (yet, or any more)."""
        self._clock_ms = clock_ms
        self._callbacks: list[ChangeCallback] = []
        self._feeds: set[Changes] = set()
        self._waits: set[_SeqWait] = set()
        self._ended_lives: deque[str] = deque(maxlen=ENDED_LIVES_KEPT)
        self._stream: Subscription | EventStream | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._error: BaseException | None = None
        self.snapshots = 0
        """Snapshots applied (the first one, and any after a resync or reconnect)."""

    # -- reading --------------------------------------------------------------

    @property
    def exists(self) -> bool:
        return self.crdt is not None

    @property
    def value(self) -> Any:
        """The plain JSON value, as ``read`` shows it; None while the CRDT does not exist."""
        view = self.view()
        return None if view is None else view["value"]

    def view(self) -> dict[str, Any] | None:
        """The read answer computed locally: ``{"id","type","seq","epoch","value",...}``.

        A copy, the caller's to change: the CRDT's view holds the values it
        keeps (a register's value, a set's elements, a node's data)."""
        if self.crdt is None:
            return None
        head = {"id": self.id, "type": self.type, "seq": self.seq, "epoch": self.epoch}
        head.update(_copy(self.crdt.view(self._clock_ms())))
        return head

    def state(self) -> Any:
        """The full mergeable state (as ``read_state`` shows it), or None.

        The state a replica loads (:func:`syncd.crdt.engine.replica_state`):
        a Yjs document's carries the updates that wait for their
        dependencies (merged in, and listed under ``pending``). Its integrated
        document alone would lose them wherever this state is loaded: the op
        delta that lets one in carries only its dependency. A copy, the
        caller's to change, as :meth:`view`'s."""
        return None if self.crdt is None else _copy(replica_state(self.crdt))

    # -- applying -------------------------------------------------------------

    def apply(self, delta: Mapping[str, Any]) -> bool:
        """Apply one delta (snapshot, op or deleted); False when it is not for
        this replica or does not follow on from its seq.

        The replica keeps a copy of what it takes from ``delta`` (a CRDT holds
        on to the values in the states and ops it loads), so the caller, and
        the callbacks and readers of :meth:`changes` given ``delta``, may
        change it afterwards."""
        if delta.get("id") != self.id:
            return False
        given = delta
        delta = _copy(delta)
        kind = delta.get("kind")
        if kind == "snapshot":
            type_name = delta.get("type") or self.type
            state = delta.get("state")
            self.crdt = None if state is None else crdt_class(str(type_name)).from_state(state)
            self.type = type_name
            self.seq = delta.get("seq") or 0
            self._enter_life(delta.get("epoch"))
            self.snapshots += 1
        elif kind == "op":
            seq = delta.get("seq")
            epoch = delta.get("epoch", self.epoch)
            if self.crdt is not None and epoch == self.epoch and seq == self.seq + 1:
                self.crdt.apply_delta(delta["op"])
            elif seq == 1 and (self.crdt is None or epoch != self.epoch):
                # A new life (created, or deleted and created again): start empty.
                self.type = str(delta.get("type") or self.type)
                crdt = crdt_class(self.type).new()
                crdt.apply_delta(delta["op"])
                self.crdt = crdt
            else:
                return False
            self.seq = int(seq)
            self._enter_life(epoch)
        elif kind == "deleted":
            self.crdt = None
            self.seq = 0
            self._enter_life(None)
        else:
            return False
        self._notify(dict(given))
        return True

    def _enter_life(self, epoch: str | None) -> None:
        """Hold ``epoch`` (None: the CRDT does not exist), remembering the
        life it ends."""
        if self.epoch is not None and epoch != self.epoch:
            self._ended_lives.append(self.epoch)
        self.epoch = epoch

    def _notify(self, delta: Delta) -> None:
        for callback in list(self._callbacks):
            try:
                callback(self, delta)
            except Exception:
                # One broken callback must not stop the replica or the others.
                log.exception("replica %s: a change callback failed", self.id)
        for feed in self._feeds:
            feed.push(delta)
        for wait in list(self._waits):
            self._judge(wait)

    # -- hearing of changes ---------------------------------------------------

    def on_change(self, callback: ChangeCallback) -> Callable[[], None]:
        """Call ``callback(replica, delta)`` after every applied delta; returns
        a function that removes it."""
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    def changes(self, buffer: int = CHANGES_BUFFER) -> Changes:
        """Every delta applied from now on, in order, as an async iterator; it
        ends when the replica is closed, raises the follow task's error, or
        ReplicaLagError when more than ``buffer`` changes are left unread."""
        feed = Changes(self, buffer)
        self._feeds.add(feed)
        return feed

    async def wait_for_seq(
        self, seq: int, timeout: float | None = None, *, epoch: str | None = None
    ) -> None:
        """Return once the replica is at ``seq`` or later of one life of the
        CRDT: ``epoch``, or without it the life the replica holds at the call
        (or, when the CRDT does not exist for it yet, the first it sees).

        A deleted CRDT made anew starts its seqs again at 1, so a seq of one
        life means nothing in another: :class:`EpochChangedError` when the
        life waited in is over (the replica saw it deleted or replaced, now or
        before the call). A replica that has not reached ``epoch`` yet (it
        still holds an older life, or none) waits for it. TimeoutError after
        ``timeout``; the follow task's error, or ClientError once closed."""
        life = epoch if epoch is not None else self.epoch
        wait = _SeqWait(seq, life, takes_first_life=epoch is None)
        self._judge(wait)
        if not wait.done.done():
            self._check_running(wait)
        self._waits.add(wait)
        try:
            async with asyncio.timeout(timeout):
                await wait.done
        finally:
            self._waits.discard(wait)

    def _judge(self, wait: _SeqWait) -> None:
        """Settle ``wait`` when its seq is reached or its life is over."""
        if wait.done.done():
            return
        if wait.life is None and wait.takes_first_life:
            wait.life = self.epoch  # (still None while the CRDT does not exist)
        if self.epoch == wait.life:
            if self.seq >= wait.seq:
                wait.done.set_result(None)
        elif wait.life is not None and wait.life in self._ended_lives:
            wait.settle(
                EpochChangedError(
                    f"replica {self.id}: the life (epoch {wait.life}) waited in for seq"
                    f" {wait.seq} is over; the replica is at seq {self.seq} of epoch"
                    f" {self.epoch}",
                    wait.life,
                    self.epoch,
                )
            )

    def _check_running(self, wait: _SeqWait) -> None:
        """Fail ``wait`` when no delta can come any more."""
        if self._error is not None:
            wait.settle(self._error)
        elif self._task is not None and self._task.done():
            wait.settle(ClientError(f"replica {self.id} is closed at seq {self.seq}"))

    # -- following the service ------------------------------------------------

    @classmethod
    async def follow(
        cls,
        client: ReplicaSource,
        crdt_id: str,
        type_name: str | None = None,
        *,
        via: str = "ws",
        **stream_options: Any,
    ) -> Replica:
        """A replica kept current from ``client.subscribe`` (``via="ws"``) or
        ``client.events`` (``via="sse"``); returns once the first snapshot is in."""
        if via not in ("ws", "sse"):
            raise ValueError("via must be 'ws' or 'sse'")
        replica = cls(crdt_id, type_name)
        stream: Subscription | EventStream = (
            client.subscribe([crdt_id], **stream_options)
            if via == "ws"
            else client.events(crdt_id, **stream_options)
        )
        replica._stream = stream
        replica._task = asyncio.create_task(replica._run(stream))
        try:
            await replica._started.wait()
        except BaseException:
            # Given up on before the first snapshot (a timeout, a cancelled
            # caller): nobody holds the replica to close it, so stop its
            # stream here rather than leave it reconnecting for ever.
            await replica.close()
            raise
        if replica._error is not None:
            await replica.close()
            raise replica._error
        return replica

    async def _run(self, stream: Subscription | EventStream) -> None:
        error: BaseException | None = None
        try:
            async for delta in stream:
                self.apply(delta)
                self._started.set()
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            error = self._error = exc
            log.warning("replica %s stopped: %r", self.id, exc)
            # Stopped by a delta it could not apply, the stream is still
            # connected (and would reconnect): nothing reads it any more.
            if self._stream is stream:
                self._stream = None
                with contextlib.suppress(Exception):
                    await stream.aclose()
        finally:
            self._started.set()
            for feed in self._feeds:
                feed.finish(error)
            for wait in list(self._waits):
                wait.settle(error or ClientError(f"replica {self.id} is closed at seq {self.seq}"))

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for feed in list(self._feeds):
            feed.finish(self._error)

    async def __aenter__(self) -> Replica:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
