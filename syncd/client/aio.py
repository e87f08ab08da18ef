"""The async client: HTTP through httpx, streams through :mod:`syncd.client.stream`.

Constructing a client validates the token locally (parse and expiry, no
signature: the client has no key) and makes no connection; every request
re-checks the expiry first, so an expired token never reaches the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Sequence
from types import TracebackType
from typing import Any, Final

import httpx

from syncd.client._http import DEFAULT_TIMEOUT_S, ClientCore, default_tls, json_answer
from syncd.client.config import ClientConfig
from syncd.client.errors import ServiceError, TransportError
from syncd.client.helpers import OpHelpers
from syncd.client.ops import Op
from syncd.client.replica import Replica
from syncd.client.retry import RETRY_ATTEMPTS, new_op_id, with_op_ids, with_retries
from syncd.client.stream import EventStream, Subscription
from syncd.client.token import wall_clock_ms

NOT_FOUND: Final = 404
"""The one status ``read`` and ``read_state`` answer with None (no such CRDT): any
other refusal (401, 403, 429, ...) raises, so a permission problem never looks
like a missing CRDT."""

Answer = dict[str, Any]

POOL_LIMITS: Final = httpx.Limits(max_connections=None, max_keepalive_connections=20)
"""No limit on the pool's connections: each SSE stream (``events``) holds one
for as long as it lasts, and with httpx's default of 100, a hundred streams
left no connection to the client's requests (each failed with PoolTimeout)
nor to a further stream. The service bounds connections
(``SERVICE_MAX_CONNECTIONS``). Idle ones kept: httpx's default."""


class AsyncClient(OpHelpers[Coroutine[Any, Any, Answer]]):
    """``AsyncClient(base_url, token, namespace)``; raises TokenParseError,
    TokenExpiredError or TokenNamespaceError (all TokenError) before any I/O."""

    def __init__(
        self,
        base_url: str,
        token: str,
        namespace: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        clock_ms: Callable[[], int] = wall_clock_ms,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.core = ClientCore(ClientConfig(base_url, token, namespace), clock_ms)
        self.config = self.core.config
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            timeout=timeout,
            headers=self.core.headers,
            transport=transport,
            limits=POOL_LIMITS,
            verify=default_tls(),
        )

    @classmethod
    def from_config(cls, config: ClientConfig | dict[str, Any], **options: Any) -> AsyncClient:
        if not isinstance(config, ClientConfig):
            config = ClientConfig.from_mapping(config)
        return cls(config.base_url, config.token, config.namespace, **options)

    @property
    def client_id(self) -> int:
        return self.core.client_id

    @property
    def namespace(self) -> str:
        return self.config.namespace

    def check_token(self) -> None:
        self.core.check_token()

    # -- lifecycle ------------------------------------------------------------

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- HTTP -----------------------------------------------------------------

    async def _send(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
    ) -> httpx.Response:
        self.core.check_token()
        try:
            return await self._http.request(method, url, params=params, json=json)
        except httpx.TransportError as exc:
            raise TransportError(f"{method} {url}: {exc!r}") from exc

    async def fetch(self, crdt_id: str, *, crdt_format: bool = False) -> Answer:
        """The read answer (``crdt_format``: the mergeable state); ServiceError
        (404 ``not_found`` for an unknown id) on any refusal."""
        params = {"format": "crdt"} if crdt_format else None
        answer: Answer = json_answer(
            await self._send("GET", self.config.crdt_url(crdt_id), params=params)
        )
        return answer

    async def read(self, crdt_id: str) -> Answer | None:
        """``{"id", "type", "seq", "epoch", "value", ...}``, or None when the
        CRDT does not exist (404); ServiceError for any other refusal."""
        try:
            return await self.fetch(crdt_id)
        except ServiceError as error:
            if error.status == NOT_FOUND:
                return None
            raise

    async def read_state(self, crdt_id: str) -> Answer | None:
        """The full mergeable state (``?format=crdt``: ``{"id","type","seq","epoch","state"}``),
        or None when the CRDT does not exist (404); ServiceError otherwise."""
        try:
            return await self.fetch(crdt_id, crdt_format=True)
        except ServiceError as error:
            if error.status == NOT_FOUND:
                return None
            raise

    async def apply(
        self,
        crdt_id: str,
        body: Op | Sequence[Op],
        *,
        return_state: bool = False,
        origin: str | None = None,
    ) -> Answer:
        """Apply an op or a batch; ``origin`` goes to every op that names none
        of its own (docs/data-model.md#origins)."""
        url, params, payload = self.core.ops_request(crdt_id, body, return_state, origin)
        answer: Answer = json_answer(await self._send("POST", url, params=params, json=payload))
        return answer

    async def apply_retrying(
        self,
        crdt_id: str,
        body: Op | Sequence[Op],
        *,
        return_state: bool = False,
        attempts: int = RETRY_ATTEMPTS,
        op_id: str | None = None,
        origin: str | None = None,
    ) -> Answer:
        """:meth:`apply` with an ``op_id`` on every op (generated unless given),
        retried on connection failures, 429 and 503: applied exactly once."""
        key = op_id or new_op_id()
        # Once, before the first attempt: every attempt sends the same ops with
        # the same op_ids (an iterator of ops would be empty on a retry).
        sent = with_op_ids(body, key)
        return await with_retries(
            lambda _key: self.apply(crdt_id, sent, return_state=return_state, origin=origin),
            op_id=key,
            attempts=attempts,
        )

    async def history(
        self,
        crdt_id: str,
        *,
        before: int | None = None,
        limit: int | None = None,
        client_id: int | None = None,
        origin: str | None = None,
    ) -> Answer:
        """Retained ops, newest first: ``{"seq", "oldest", "ops": [{"seq",
        "client_id", "ts", "op", "origin"?}], "next"}``; pass ``next`` as
        ``before`` for the older page (docs/http-api.md#history-and-restore).
        With ``client_id`` and/or ``origin``, only that writer's ops."""
        params = self.core.history_params(before, limit, client_id, origin)
        answer: Answer = json_answer(
            await self._send("GET", self.config.crdt_url(crdt_id, "/history"), params=params)
        )
        return answer

    async def at(self, crdt_id: str, seq: int, *, crdt_format: bool = False) -> Answer:
        """The read answer as it was right after op ``seq``; ServiceError 410
        ``history_expired`` (``.body["oldest"]``) when that is no longer kept."""
        params = self.core.at_params(seq, crdt_format)
        answer: Answer = json_answer(
            await self._send("GET", self.config.crdt_url(crdt_id), params=params)
        )
        return answer

    async def restore(self, crdt_id: str, seq: int, *, op_id: str | None = None) -> Answer:
        """Make the value what it was at ``seq``, by ordinary ops: ``{"ok",
        "seq", "applied", "restored"}``; 409 ``not_restorable`` for gcounter
        and presence. With ``op_id`` a repeat answers as the first did."""
        body = self.core.restore_body(seq, op_id)
        answer: Answer = json_answer(
            await self._send("POST", self.config.crdt_url(crdt_id, "/restore"), json=body)
        )
        return answer

    async def revert(
        self,
        crdt_id: str,
        *,
        client_id: int | None = None,
        origin: str | None = None,
        since_seq: int | None = None,
        until_seq: int | None = None,
        op_id: str | None = None,
    ) -> Answer:
        """Take back one writer's ops (docs/revert.md): ``{"ok", "seq",
        "applied", "matched", "since_seq", "until_seq"}``; 409
        ``not_revertible`` for gcounter and presence, 410 ``history_expired``
        when ``since_seq`` is older than retained. With ``op_id`` a repeat
        answers as the first did. ValueError when it names no writer."""
        body = self.core.revert_body(client_id, origin, since_seq, until_seq, op_id)
        answer: Answer = json_answer(
            await self._send("POST", self.config.crdt_url(crdt_id, "/revert"), json=body)
        )
        return answer

    async def list_crdts(
        self, *, prefix: str = "", limit: int | None = None, cursor: str | None = None
    ) -> Answer:
        """One page: ``{"crdts": [{"id","type","seq"}], "next": cursor | None}``."""
        params = self.core.list_params(prefix, limit, cursor)
        answer: Answer = json_answer(
            await self._send("GET", f"{self.config.namespace_url}/crdts", params=params)
        )
        return answer

    async def delete_crdt(self, crdt_id: str) -> None:
        """Delete a CRDT (a namespace admin token); ServiceError 404 when there is none."""
        json_answer(await self._send("DELETE", self.config.crdt_url(crdt_id)))

    async def me(self) -> Answer:
        """The service's view of this client's token (``GET .../tokens/me``)."""
        answer: Answer = json_answer(
            await self._send("GET", f"{self.config.namespace_url}/tokens/me")
        )
        return answer

    # -- streams --------------------------------------------------------------

    def subscribe(self, ids: Iterable[str], **options: Any) -> Subscription:
        """Deltas of ``ids`` over one WebSocket, resumed across reconnects
        (see :class:`syncd.client.stream.Subscription` for the options)."""
        return Subscription(self, ids, **options)

    def events(self, crdt_id: str, **options: Any) -> EventStream:
        """Deltas of one CRDT over SSE, resumed across reconnects."""
        return EventStream(self, crdt_id, **options)

    async def replica(
        self, crdt_id: str, type_name: str | None = None, *, via: str = "ws"
    ) -> Replica:
        """A started :class:`syncd.client.replica.Replica` of ``crdt_id`` (its first snapshot is in)."""
        return await Replica.follow(self, crdt_id, type_name, via=via)

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying httpx client (streams share its connection pool)."""
        return self._http
