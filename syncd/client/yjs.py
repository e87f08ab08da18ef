"""Keep a pycrdt ``Doc`` in sync with a syncd Yjs document (docs/yjs.md).

::

    doc = Doc()
    async with YjsProvider("http://127.0.0.1:8080", "myapp", "notes", doc, token) as provider:
        await provider.synced.wait()
        doc.get("content", type=Text).insert(0, "hello")

The provider speaks the y-websocket protocol to ``/v1/namespaces/NS/yjs/ROOM``
as the JavaScript ``WebsocketProvider`` does: it sends its state vector and
what the server lacks, applies what the server sends, and sends each local
transaction as an update. When the connection drops it reconnects (with
backoff) and syncs again by state vector, so edits made meanwhile are merged
both ways. ``set_awareness`` publishes this client's awareness state, and
the provider renews it as y-protocols clients do (peers drop a state not
renewed within 30 s) and announces it again after each reconnect (a state
cleared with ``set_awareness(None)`` stays cleared); ``awareness`` holds the
room's, emptied while disconnected.

The token may be a function (plain or async) called before each connect, so
a provider whose token ends on an open connection (close 4401, or 4403 when
its read rule ends) goes on with a new one; a fixed token is refused at the
next handshake (401 or 403, ``refused``) and the provider stops. When the
document is deleted (close 4410) the provider stops, ``closed`` says so, and
it does not send its copy back.

Needs ``websockets`` (the ``syncd[client]`` extra) and pycrdt.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import quote, urlsplit, urlunsplit

from pycrdt import (
    Decoder,
    Doc,
    Encoder,
    YMessageType,
    create_sync_message,
    create_update_message,
    handle_sync_message,
)
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from syncd.client._http import retry_after_s
from syncd.client.retry import RETRY_AFTER_MAX_S

log = logging.getLogger("syncd.client.yjs")

RECONNECT_MIN_S: Final = 0.1
RECONNECT_MAX_S: Final = 10.0
"""Backoff between reconnects: doubled per failure up to this."""

STABLE_CONNECTION_S: Final = 2.0
"""A connection that lasted this long worked: the backoff starts again from
:data:`RECONNECT_MIN_S`. One closed sooner counts as a failure, so the
backoff goes on doubling: the service closes a connection that sends an
update it refuses (too large, forbidden), and every reconnect's sync sends
that update again. Far longer than a sync and its refusal take."""

AWARENESS_RENEW_S: Final = 15.0
"""How often our awareness state is sent again while set: half of y-protocols'
30 s ``outdatedTimeout``, after which peers and syncd's other nodes drop it."""

_FINAL_STATUSES: Final = frozenset({400, 401, 403, 404, 409})
"""Handshake refusals that another try would only meet again."""

CLOSE_DOCUMENT_DELETED: Final = 4410
"""The server's close when the document is deleted (y-websocket's final
range, 4400-4499). Reconnecting would send our copy and create it again."""

_FINAL_CLOSES: Final = frozenset({CLOSE_DOCUMENT_DELETED})
"""Closes after which the provider stops. Not 4401 (the token ended) nor 4403
(its read rule ended): a token function may give a new one, and a fixed
token is refused at the next handshake, which stops the provider there."""

TokenSource = str | Callable[[], str | Awaitable[str]]
"""A token, or a function (plain or async) giving the one to connect with."""

_SYNC_STEP2: Final = 1
_MESSAGE_AUTH: Final = 2


def yjs_url(base_url: str, ns: str, room: str, token: str) -> str:
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = (
        f"{parts.path.rstrip('/')}/v1/namespaces/{quote(ns, safe='')}/yjs/{quote(room, safe=':')}"
    )
    return urlunsplit((scheme, parts.netloc, path, f"token={quote(token, safe='')}", ""))


class YjsProvider:
    def __init__(
        self,
        base_url: str,
        ns: str,
        room: str,
        doc: Doc[Any],
        token: TokenSource,
        *,
        awareness_renew_s: float = AWARENESS_RENEW_S,
    ) -> None:
        self._where = (base_url, ns, room)
        self._token = token
        self.url = yjs_url(base_url, ns, room, token) if isinstance(token, str) else ""
        """The URL of the last connect (its token included)."""
        self.doc = doc
        self.synced = asyncio.Event()
        """Set once the server's step 2 has arrived (after each reconnect too)."""
        self.denied: str | None = None
        """The server's reason when it ignored our updates (a read-only token)."""
        self.awareness: dict[int, Any] = {}
        """The room's awareness states by awareness client id."""
        self.refused: int | None = None
        """The HTTP status when the handshake was refused for good (400,
        401, 403, 404, 409): then it stops. A refusal worth retrying (429,
        5xx) is retried (after its Retry-After) and leaves this None."""
        self.closed: tuple[int, str] | None = None
        """The server's close (code, reason) that stopped the provider: the
        document was deleted (4410, ``document deleted``)."""
        self.clocks: dict[int, int] = {}
        """The newest awareness clock seen of each awareness client."""
        self._local_state: Any = None
        self._clock = 0
        self._ws: ClientConnection | None = None
        self._applying = False
        self._task: asyncio.Task[None] | None = None
        self._subscription: Any = None
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._renew_s = awareness_renew_s
        self._renew_at = 0.0

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def start(self) -> None:
        self._subscription = self.doc.observe(self._local_update)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._subscription is not None:
            self.doc.unobserve(self._subscription)
            self._subscription = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def set_awareness(self, state: Any) -> None:
        """Publish this client's awareness state (None: leave)."""
        self._local_state = state
        self._clock += 1
        ws = self._ws
        if ws is not None:
            self._outbox.put_nowait(self._awareness_message())

    def _awareness_message(self) -> bytes:
        self._renew_at = time.monotonic() + self._renew_s
        update = Encoder()
        update.write_var_uint(1)
        update.write_var_uint(self.doc.client_id)
        update.write_var_uint(self._clock)
        update.write_var_string(json.dumps(self._local_state))
        message = Encoder()
        message.write_var_uint(YMessageType.AWARENESS)
        body = update.to_bytes()
        message.write_var_uint(len(body))
        return message.to_bytes() + body

    def _local_update(self, event: Any) -> None:
        # Not while disconnected: the next connection's sync covers every
        # edit made meanwhile (and throws the queue away), so queueing them
        # only held memory for as long as the outage lasted.
        if not self._applying and self._ws is not None:
            self._outbox.put_nowait(create_update_message(event.update))

    async def _current_url(self) -> str:
        token = self._token
        if not isinstance(token, str):
            given = token()
            token = await given if inspect.isawaitable(given) else given
        self.url = yjs_url(*self._where, token)
        return self.url

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = RECONNECT_MIN_S
        while True:
            opened_at: float | None = None
            try:
                url = await self._current_url()
            except Exception:
                # The caller's function (its own service away, say): asked
                # again after the backoff, as a failed connect is retried.
                log.warning("the Yjs provider's token function failed", exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            try:
                async with connect(url, max_size=None) as ws:
                    opened_at = loop.time()
                    await self._session(ws)
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in _FINAL_STATUSES:
                    self.refused = status
                    log.warning("syncd refused the Yjs connection: %s", exc)
                    return
                # Worth another try (429, 503, ...): not a refusal that stops
                # the provider, so not ``refused``. Knocking again before the
                # Retry-After would only be refused again (and count again).
                log.info("syncd refused the Yjs connection for now: %s", exc)
                wait = retry_after_s(exc.response.headers.get("retry-after"))
                if wait is not None:
                    delay = max(delay, min(wait, RETRY_AFTER_MAX_S))
            except ConnectionClosed as exc:
                if exc.rcvd is not None and exc.rcvd.code in _FINAL_CLOSES:
                    self.closed = (exc.rcvd.code, exc.rcvd.reason)
                    log.warning("syncd closed the Yjs connection for good: %s", exc)
                    return
                log.info("Yjs connection lost (%s); reconnecting", exc)
            except (OSError, WebSocketException) as exc:
                log.info("Yjs connection lost (%s); reconnecting", exc)
            finally:
                self._ws = None
                self.synced.clear()
                # As y-websocket: the peers' states are dropped with the
                # connection; the room sends the live ones on our return, and
                # nobody would tell us of a peer that left meanwhile.
                self.awareness.clear()
            if opened_at is not None and loop.time() - opened_at >= STABLE_CONNECTION_S:
                delay = RECONNECT_MIN_S
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)

    async def _session(self, ws: ClientConnection) -> None:
        self._ws = ws
        # Whatever was queued for the old connection is covered by this sync.
        while not self._outbox.empty():
            self._outbox.get_nowait()
        await ws.send(create_sync_message(self.doc))
        if self._local_state is not None:
            # Announced again, at a new clock: the room removed our state when
            # the old connection went, but remembers its clock, and y-protocols
            # ignores a state at a clock already seen (peers would not see us
            # again until the next renewal).
            self._clock += 1
            await ws.send(self._awareness_message())
        sender = asyncio.get_running_loop().create_task(self._send(ws))
        try:
            async for message in ws:
                if isinstance(message, bytes) and message:
                    await self._receive(ws, message)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

    async def _send(self, ws: ClientConnection) -> None:
        while True:
            wait = None
            if self._local_state is not None:
                wait = max(0.0, self._renew_at - time.monotonic())
            try:
                message = await asyncio.wait_for(self._outbox.get(), wait)
            except TimeoutError:
                self._clock += 1
                message = self._awareness_message()
            await ws.send(message)

    async def _receive(self, ws: ClientConnection, message: bytes) -> None:
        kind = message[0]
        if kind == YMessageType.SYNC:
            self._applying = True
            try:
                reply = handle_sync_message(message[1:], self.doc)
            finally:
                self._applying = False
            if reply is not None:
                await ws.send(reply)
            if len(message) > 1 and message[1] == _SYNC_STEP2:
                self.synced.set()
        elif kind == YMessageType.AWARENESS:
            self._apply_awareness(message[1:])
        elif kind == _MESSAGE_AUTH:
            decoder = Decoder(message[2:])
            self.denied = decoder.read_var_string()

    def _apply_awareness(self, body: bytes) -> None:
        update = Decoder(Decoder(body).read_message() or b"")
        for _ in range(update.read_var_uint()):
            client = update.read_var_uint()
            clock = update.read_var_uint()
            state = json.loads(update.read_var_string() or "null")
            if client == self.doc.client_id:
                continue  # our own, back from the server (its sign of life): not the room's
            if clock < self.clocks.get(client, 0):
                continue
            self.clocks[client] = clock
            if state is None:
                self.awareness.pop(client, None)
            else:
                self.awareness[client] = state
