"""Revocations: refusing every token of one client in one namespace issued
before a time (docs/permissions.md#revoking-tokens).

An admin revokes with ``POST /v1/namespaces/:ns/revocations``
``{"client_id", "before_ms"?}``: from then on every token of that client in
that namespace whose ``issued_at`` is before ``before_ms`` (default: now) is
refused with 401 ``token_revoked``, and what such tokens hold open (event
streams, WebSockets, Yjs connections) ends. A token without ``issued_at``
(from before the claim existed) counts as issued at 0. A later token of the
same client works, so "log this device out" is: revoke, then issue it a new
token.

Three parts:

- :class:`RevocationTable`, in memory: what :meth:`Authenticator.authenticate`
  consults (:attr:`RevocationTable.before`, one dictionary lookup per request,
  none at all while nothing is revoked) and the registry of live connections
  by client, so a revocation ends them at once without any polling.
- :class:`RevocationStore`, where revocations are kept:
  :class:`FileRevocationStore` for the embedded store (one small file in the
  data directory, rewritten atomically), or
  :class:`syncd.auth.revocations_pg.PgRevocationStore` (a table, which every
  node of a cluster re-reads when it changes).
- :class:`Revocations`, the admin operations over both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from syncd.crdt.validate import json_int
from syncd.errors import ApiError, bad_request, unavailable
from syncd.files import NotRegularFile, read_regular, write_atomically

log = logging.getLogger("syncd.auth")

TOKEN_REVOKED_MESSAGE: Final = "token revoked"

MAX_REVOCATIONS_PER_NAMESPACE: Final = 10_000
"""Revocations one namespace may hold. Each costs memory on every node and a
line in the file rewritten on every change; a namespace that needs more is
better served by shorter token lifetimes. Lifting old ones makes room."""

MAX_CLIENT_ID: Final = 2**53 - 1
"""As for tokens (syncd/auth/tokens.py): exact in JavaScript numbers."""

MAX_MS: Final = 2**63 - 1
"""The largest ``before_ms`` (int64 ms, as ``expires_at``)."""

REVOCATIONS_FILE: Final = "revocations.json"
"""The embedded store's revocations, in the data directory."""

FILE_FORMAT: Final = 1
"""``format`` of the file; another value is refused at start."""

_BODY_KEYS: Final = frozenset({"client_id", "before_ms"})

NEXT_MS_POLL_S: Final = 0.0002
"""How often a revocation without ``before_ms`` reads the clock while it
waits for the next millisecond (:meth:`Revocations._next_millisecond`): a
fraction of one, so the wait stays under a millisecond and a bit."""

NEXT_MS_MAX_WAIT_S: Final = 0.01
"""The longest that wait lasts (event-loop time): the wall clock moves on
within a millisecond, but a clock that stands still (stepped back, or
frozen) must not hold a revocation up."""


def token_revoked() -> ApiError:
    return ApiError(401, "token_revoked", TOKEN_REVOKED_MESSAGE)


def revoke_key(namespace: str, client_id: int) -> str:
    """The dictionary key of a client: ``/`` never occurs in a namespace, so
    this is unambiguous, and a string caches its hash (a tuple would hash its
    items on every lookup)."""
    return f"{namespace}/{client_id}"


@dataclass(frozen=True, slots=True)
class Revocation:
    namespace: str
    client_id: int
    before_ms: int
    """Tokens of the client issued before this instant (ms) are refused."""
    revoked_at: int
    """When the admin asked (ms, the server's clock)."""

    @property
    def key(self) -> str:
        return revoke_key(self.namespace, self.client_id)

    def to_json(self) -> dict[str, Any]:
        """As the routes answer it (the namespace is the path's)."""
        return {
            "client_id": self.client_id,
            "before_ms": self.before_ms,
            "revoked_at": self.revoked_at,
        }

    def to_record(self) -> dict[str, Any]:
        return {"namespace": self.namespace, **self.to_json()}


class Holder(Protocol):
    """What the registry needs of a principal (``Authenticator.Principal``)."""

    @property
    def revoke_key(self) -> str:
        """Empty for the root admin."""

    @property
    def issued_at(self) -> int: ...


class Revocable(Protocol):
    """An open connection, or one document of one, that a revocation ends."""

    def end_revoked(self) -> None:
        """End it now with ``token_revoked`` (the connection's own end path)."""


class RevocationTable:
    """The revocations in force on this node and the live connections they may end.

    :attr:`before` is read on every request and is only ever changed in place
    (the authenticator holds the same dictionary)."""

    def __init__(self) -> None:
        self.before: dict[str, int] = {}
        """revoke key -> before_ms."""
        self._by_ns: dict[str, dict[int, Revocation]] = {}
        self._live: dict[str, dict[Revocable, int]] = {}
        """revoke key -> {open connection: its token's issued_at}."""

    # -- requests ------------------------------------------------------------

    def is_revoked(self, holder: Holder) -> bool:
        before = self.before.get(holder.revoke_key)
        return before is not None and holder.issued_at < before

    def listing(self, namespace: str) -> list[Revocation]:
        """The namespace's revocations by client id."""
        entries = self._by_ns.get(namespace)
        return [entries[c] for c in sorted(entries)] if entries else []

    def get(self, namespace: str, client_id: int) -> Revocation | None:
        entries = self._by_ns.get(namespace)
        return entries.get(client_id) if entries else None

    def count(self, namespace: str) -> int:
        return len(self._by_ns.get(namespace, ()))

    def entries(self) -> list[Revocation]:
        return [r for ns in sorted(self._by_ns) for r in self.listing(ns)]

    # -- live connections ----------------------------------------------------

    def watch(self, holder: Holder, connection: Revocable) -> bool:
        """Register an open connection of ``holder``'s token; True when that
        token is revoked already (it was, between its check and now): the
        caller ends the connection then, it is not registered."""
        key = holder.revoke_key
        if not key:
            return False  # the root admin: nothing to revoke
        if self.is_revoked(holder):
            return True
        self._live.setdefault(key, {})[connection] = holder.issued_at
        return False

    def unwatch(self, holder: Holder, connection: Revocable) -> None:
        key = holder.revoke_key
        if not key:
            return
        live = self._live.get(key)
        if live is not None:
            live.pop(connection, None)
            if not live:
                del self._live[key]

    def live_count(self) -> int:
        return sum(len(v) for v in self._live.values())

    # -- changes -------------------------------------------------------------

    def replace(self, revocations: Iterable[Revocation]) -> int:
        """Make ``revocations`` the whole table; end the open connections that
        a new or later ``before_ms`` refuses. Returns how many were ended."""
        fresh = {r.key: r for r in revocations}
        before = self.before
        raised: list[tuple[str, int]] = []
        for key in [k for k in before if k not in fresh]:
            del before[key]
        for key, revocation in fresh.items():
            old = before.get(key)
            if old != revocation.before_ms:
                before[key] = revocation.before_ms
                if old is None or revocation.before_ms > old:
                    raised.append((key, revocation.before_ms))
        by_ns: dict[str, dict[int, Revocation]] = {}
        for revocation in fresh.values():
            by_ns.setdefault(revocation.namespace, {})[revocation.client_id] = revocation
        self._by_ns = by_ns
        ended = 0
        for key, before_ms in raised:
            ended += self._end(key, before_ms)
        return ended

    def _end(self, key: str, before_ms: int) -> int:
        live = self._live.get(key)
        if not live:
            return 0
        doomed = [conn for conn, issued_at in live.items() if issued_at < before_ms]
        for conn in doomed:
            live.pop(conn, None)
        if not live:
            self._live.pop(key, None)
        for conn in doomed:
            try:
                conn.end_revoked()
            except Exception:
                log.exception("ending a revoked connection failed")
        return len(doomed)


# -- storage -------------------------------------------------------------------

Apply = Callable[[list[Revocation]], object]
"""Receives the whole set of revocations each time it may have changed."""


class RevocationStore(Protocol):
    async def open(self, apply: Apply) -> None:
        """Load what is kept and ``apply`` it (before the node serves); from then
        on ``apply`` every change, this node's and (in a cluster) the others'."""

    async def put(self, revocation: Revocation) -> None:
        """Add or replace the client's revocation; durable, then applied."""

    async def delete(self, namespace: str, client_id: int) -> bool:
        """Lift it; durable, then applied. False: there was none."""

    async def close(self) -> None: ...


class RevocationFileError(OSError):
    """The revocations file cannot be read. An OSError so the start reports it
    in one line, as it does a data directory it cannot open; the server does
    not start without its revocations (that would let revoked tokens in)."""


def parse_file(data: bytes, path: Path) -> list[Revocation]:
    """The revocations of a ``revocations.json``; RevocationFileError naming
    the path for anything else."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
            raise ValueError(f"not format {FILE_FORMAT}")
        entries = doc["revocations"]
        if not isinstance(entries, list):
            raise ValueError("revocations is not a list")
        return [_revocation(entry) for entry in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise RevocationFileError(f"revocations file {path} is damaged: {exc}") from None


def _revocation(entry: Any) -> Revocation:
    if not isinstance(entry, dict):
        raise ValueError("an entry is not an object")
    namespace = entry["namespace"]
    if not isinstance(namespace, str) or not namespace or "/" in namespace:
        raise ValueError("an entry has a bad namespace")
    values = [entry[name] for name in ("client_id", "before_ms", "revoked_at")]
    if any(type(v) is not int or not 0 <= v <= MAX_MS for v in values):
        raise ValueError("an entry has a bad number")
    return Revocation(namespace, *values)


def render_file(revocations: Iterable[Revocation]) -> bytes:
    records = [r.to_record() for r in revocations]
    return json.dumps({"format": FILE_FORMAT, "revocations": records}, indent=1).encode() + b"\n"


class FileRevocationStore:
    """The embedded store's revocations: ``<data dir>/revocations.json``,
    rewritten whole (it is small) by :func:`write_atomically` in a worker
    thread, one change at a time."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / REVOCATIONS_FILE
        self._entries: dict[str, Revocation] = {}
        self._apply: Apply | None = None
        self._lock = asyncio.Lock()

    async def open(self, apply: Apply) -> None:
        self._apply = apply
        try:
            data = read_regular(self.path)
        except FileNotFoundError:
            data = None
        except NotRegularFile:
            raise RevocationFileError(
                f"revocations file {self.path} is not a regular file"
            ) from None
        except OSError as exc:
            raise RevocationFileError(
                f"cannot read revocations file {self.path}: {exc.strerror}"
            ) from None
        entries = parse_file(data, self.path) if data is not None else []
        self._entries = {r.key: r for r in entries}
        if entries:
            log.info("%d revocations loaded from %s", len(entries), self.path)
        apply(list(self._entries.values()))

    async def put(self, revocation: Revocation) -> None:
        async with self._lock:
            entries = dict(self._entries)
            entries[revocation.key] = revocation
            await self._save(entries)

    async def delete(self, namespace: str, client_id: int) -> bool:
        async with self._lock:
            key = revoke_key(namespace, client_id)
            if key not in self._entries:
                return False
            entries = dict(self._entries)
            del entries[key]
            await self._save(entries)
            return True

    async def _save(self, entries: dict[str, Revocation]) -> None:
        ordered = sorted(entries.values(), key=lambda r: (r.namespace, r.client_id))
        try:
            await asyncio.to_thread(write_atomically, self.path, render_file(ordered))
        except OSError as exc:
            log.error("cannot write %s: %s", self.path, exc)
            raise unavailable("the revocation could not be stored") from None
        self._entries = entries
        if self._apply is not None:
            self._apply(ordered)

    async def close(self) -> None:
        async with self._lock:
            pass  # a write in progress finishes first


# -- the admin operations ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RevokeRequest:
    client_id: int
    before_ms: int | None


def parse_revoke_body(body: Any) -> RevokeRequest:
    """``{"client_id": N, "before_ms"?: ms}``; unknown fields are refused (a
    typo must not revoke something else than meant)."""
    if not isinstance(body, dict):
        raise bad_request("body: must be a JSON object")
    extra = sorted(str(k) for k in body if k not in _BODY_KEYS)
    if extra:
        raise bad_request(f"unknown field(s): {', '.join(extra)}")
    if "client_id" not in body:
        raise bad_request(f"client_id: an integer from 0 to {MAX_CLIENT_ID} is required")
    return RevokeRequest(
        parse_client_id(body["client_id"]),
        _ms(body["before_ms"]) if body.get("before_ms") is not None else None,
    )


def parse_client_id(value: Any) -> int:
    number = json_int(value)
    if number is None or not 0 <= number <= MAX_CLIENT_ID:
        raise bad_request(f"client_id: must be an integer from 0 to {MAX_CLIENT_ID}")
    return number


def parse_client_id_text(text: str) -> int:
    """A client id from a path segment (decimal, no sign, no leading zeros)."""
    if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0"):
        raise bad_request("client_id: must be a decimal integer")
    if len(text) > len(str(MAX_CLIENT_ID)):
        raise bad_request(f"client_id: must be an integer from 0 to {MAX_CLIENT_ID}")
    return parse_client_id(int(text))


def _ms(value: Any) -> int:
    number = json_int(value)
    if number is None or not 0 <= number <= MAX_MS:
        raise bad_request(f"before_ms: must be an integer from 0 to {MAX_MS} (ms since the epoch)")
    return number


def too_many(namespace: str) -> ApiError:
    return ApiError(
        409,
        "too_many_revocations",
        f"namespace {namespace!r} has {MAX_REVOCATIONS_PER_NAMESPACE} revocations, the most it"
        " may hold: lift some first",
    )


class Revocations:
    """Revoke, lift and list, kept by ``store`` and enforced through ``table``."""

    def __init__(
        self, table: RevocationTable, store: RevocationStore, clock_ms: Callable[[], int]
    ) -> None:
        self.table = table
        self.store = store
        self._clock = clock_ms
        self._revoking = asyncio.Lock()
        """Held from the limit check until the table holds the new revocation:
        revocations racing for a namespace's last place would otherwise all
        see it free and all be kept."""

    async def open(self) -> None:
        await self.store.open(self.table.replace)

    async def revoke(self, namespace: str, request: RevokeRequest) -> Revocation:
        if request.before_ms is None:
            await self._next_millisecond()
        async with self._revoking:
            now = self._clock()
            before_ms = now if request.before_ms is None else request.before_ms
            table = self.table
            if (
                table.get(namespace, request.client_id) is None
                and table.count(namespace) >= MAX_REVOCATIONS_PER_NAMESPACE
            ):
                raise too_many(namespace)
            revocation = Revocation(namespace, request.client_id, before_ms, now)
            # The store applies it to the table before it returns.
            await self.store.put(revocation)
        log.info(
            "revoked the tokens of client %d in %s issued before %d",
            request.client_id,
            namespace,
            before_ms,
        )
        return revocation

    async def _next_millisecond(self) -> None:
        """Return once the clock reads another millisecond than it reads now
        (or after :data:`NEXT_MS_MAX_WAIT_S`, should it stand still).

        A revocation without ``before_ms`` refuses the tokens issued before it
        was asked for, and ``issued_at`` counts whole milliseconds: a token
        issued in the millisecond the revocation then reads as "now" has
        ``issued_at == before_ms``, which is not before it, and would outlive
        the revocation. Reading "now" in a later millisecond than any token
        issued before the request puts every such token before the line, and
        every token issued after the answer on or after it."""
        start = self._clock()
        deadline = asyncio.get_running_loop().time() + NEXT_MS_MAX_WAIT_S
        while self._clock() == start and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(NEXT_MS_POLL_S)

    async def lift(self, namespace: str, client_id: int) -> bool:
        lifted = await self.store.delete(namespace, client_id)
        if lifted:
            log.info("lifted the revocation of client %d in %s", client_id, namespace)
        return lifted

    def listing(self, namespace: str) -> list[Revocation]:
        return self.table.listing(namespace)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.store.close()


def revocations_json(revocations: Iterable[Revocation]) -> Mapping[str, Any]:
    return {"revocations": [r.to_json() for r in revocations]}
