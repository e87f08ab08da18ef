"""CRDT routes (docs/http-api.md#routes): read (now, or ``?at=SEQ``), ops, list, delete.

A read shows only ops that are durable (docs/protocol.md, "Durability and
ordering"). Memory is ahead of the store by the ops in flight (applied, their
records on their way to disk in the group commit, or a commit under way on
PostgreSQL): a read answered from it could show an op that a failed write
removes, or that a crash right after the read undoes. So a read of a CRDT
with ops in flight waits for them (``CrdtService.durable_read``); one with none, the
common case, is answered at once after one look at the store
(``Store.holds``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from typing import Any, Final, TypeVar

from syncd.auth.authenticator import Authenticator, Principal
from syncd.crdt.engine import ApplyResult, Engine
from syncd.crdt.types import check_ops_named, type_for_id, with_type_list
from syncd.crdt.validate import check_origin, with_origin
from syncd.crdt.ydoc import ROOT_KINDS, ViewTooDeep, YDoc, read_root_view
from syncd.errors import ApiError, bad_request, not_found, type_mismatch
from syncd.history.service import HistoryService
from syncd.http.handlers.guards import admin_guard, authenticated, may_write_guard
from syncd.http.handlers.history import parse_seq
from syncd.http.handlers.listing import parse_listing_query
from syncd.http.request import Request
from syncd.http.response import Deferred, Response, json_response
from syncd.http.router import Guard, Router
from syncd.ids import check_crdt_id, check_namespace
from syncd.service import CrdtService

MAX_ROOT_NAME: Final = 256
"""A Yjs root type's name in ``?root=``: editors use short names (``default``, ``content``)."""
READ_PARAMS: Final = ("at", "format", "root", "as")
OPS_PARAMS: Final = ("return", "origin")
RETURN_STATE: Final = "state"
"""``?return=``'s one value on the ops route: the answer carries the state after the ops."""
ROOT_READ_THREAD_BYTES: Final = 64 * 1024
"""A Yjs document at least this large (its update) is decoded for a
``?root=`` read in a thread: Yrs decodes one of 2 MB in about a tenth of a
second and lets the GIL go while it does, and a document near the CRDT size
limit takes seconds, every other request on the event loop waiting. Smaller
ones are decoded in place (a thread hop would cost more than the decode)."""
MAX_ROOT_READ_THREADS: Final = 2
"""``?root=`` reads decoding in threads at once, at most: each holds a decoded
copy of its document (several times its update) outside the engine's memory
budget, so many at once must not multiply that; the rest wait their turn."""
FULL_FORMAT: Final = "crdt"
"""``?format=``'s one value: the mergeable state instead of the view."""

T = TypeVar("T")


def _always() -> bool:
    return True


_NOT_ASKED: Final[Any] = object()
"""``answer``'s state when ``?return=state`` was not asked."""


def wants_full(query: Mapping[str, str]) -> bool:
    """``?format=crdt``: True; absent: False; anything else 400 (not the view
    unasked, which a client would take for the state it asked for)."""
    value = query.get("format")
    if value is None:
        return False
    if value != FULL_FORMAT:
        raise bad_request(f"format: {FULL_FORMAT} is the only one (leave it out for the view)")
    return True


def check_return(query: Mapping[str, str]) -> None:
    """400 for a ``?return=`` other than ``state``."""
    if query.get("return", RETURN_STATE) != RETURN_STATE:
        raise bad_request(f"return: {RETURN_STATE} is the only one (leave it out)")


def ops_guard(auth: Authenticator) -> Guard:
    """The ops route's guard (before a ``100 Continue``): a token that may
    write the id (``may_write_guard``), and the query, which the handler
    refuses whatever ops the body holds: a repeated or bad ``?origin=`` or
    ``?return=``, and with ``?return=state`` a token that may not read the
    id (the answer holds its state)."""
    write_guard = may_write_guard(auth)

    def guard(request: Request) -> None:
        write_guard(request)
        if not request.query_string:
            return
        query = request.known_query(OPS_PARAMS)
        check_return(query)
        if "origin" in query:
            check_origin(query["origin"], error=bad_request)
        if "return" in query:
            auth.check_read(request.principal, check_crdt_id(request.params["id"]))

    return guard


def register(
    router: Router,
    *,
    auth: Authenticator,
    engine: Engine,
    service: CrdtService,
    history: HistoryService,
    json_max_depth: int,
) -> None:
    root_read_threads = asyncio.Semaphore(MAX_ROOT_READ_THREADS)

    async def in_root_read_thread(encoded: bytes, name: str, kind: str) -> tuple[Any, list[str]]:
        """``read_root_view`` in a thread, one of MAX_ROOT_READ_THREADS. The
        turn is given back when the decode ends, not when the request does:
        a client that hangs up cancels its request, not the thread, and its
        decoded copy is held until the thread ends."""
        await root_read_threads.acquire()
        loop = asyncio.get_running_loop()

        def decode() -> tuple[Any, list[str]]:
            try:
                return read_root_view(encoded, name, kind)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(root_read_threads.release)

        try:
            decoding = loop.run_in_executor(None, decode)
        except BaseException:
            root_read_threads.release()
            raise
        # Taken when no request waits for it (a client that hung up), so
        # that asyncio does not log it as never retrieved.
        decoding.add_done_callback(lambda done: done.cancelled() or done.exception())
        # Shielded: cancelling the executor's future could drop a decode not
        # started yet, and its turn with it.
        return await asyncio.shield(decoding)

    def read(request: Request) -> Response | Awaitable[Response]:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_read(principal, crdt_id)
        full = False
        if request.query_string:
            query = request.known_query(READ_PARAMS)
            if "root" in query or "as" in query:
                return read_root(ns, crdt_id, query)
            full = wants_full(query)
            if "at" in query:
                return read_at(ns, crdt_id, parse_seq(query["at"], "at"), full)
        entry = engine.lookup((ns, crdt_id))
        if entry is None or not service.store.holds(ns, crdt_id, entry.epoch, entry.seq):
            # Not in memory (read from the store first), or ops in flight on it.
            return read_durable(ns, crdt_id, full)
        return json_response(engine.read(ns, crdt_id, full=full))

    async def read_durable(ns: str, crdt_id: str, full: bool) -> Response:
        view = await service.durable_read(ns, crdt_id, lambda: engine.read(ns, crdt_id, full=full))
        if view is None:
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return json_response(view)

    async def read_at(ns: str, crdt_id: str, seq: int, full: bool) -> Response:
        return json_response(await history.read_at(ns, crdt_id, seq, full=full))

    async def read_root(ns: str, crdt_id: str, query: Mapping[str, str]) -> Response:
        """``?root=NAME&as=text|map|array|xml`` on a Yjs document: one root type as JSON."""
        kind_of_id = type_for_id(crdt_id)
        if kind_of_id != YDoc.TYPE:
            asked = "root" if "root" in query else "as"
            raise type_mismatch(
                f"{asked}: {crdt_id!r} is {kind_of_id or 'not a typed id'}; only Yjs documents "
                "(yd: ids) have root types"
            )
        if "root" not in query:
            raise bad_request(f"root: required with as (?root=NAME&as={'|'.join(ROOT_KINDS)})")
        if "format" in query:
            raise bad_request(
                "format: not with root (a root view is JSON of one root type; "
                "format=crdt reads the whole document's state)"
            )
        name, kind = query["root"], query.get("as", "text")
        if not name or len(name) > MAX_ROOT_NAME:
            raise bad_request(f"root: 1 to {MAX_ROOT_NAME} characters")
        if kind not in ROOT_KINDS:
            raise bad_request(f"as: one of {', '.join(ROOT_KINDS)}")
        if "at" in query:
            seq = parse_seq(query["at"], "at")
            entry, crdt = await history.state_at(ns, crdt_id, seq)
            assert isinstance(crdt, YDoc)
            type_name, epoch, encoded = entry.type, entry.epoch, crdt.encoded()
        else:

            def take() -> tuple[str, str, int, bytes] | None:
                found = engine.get(ns, crdt_id)
                if found is None:
                    return None
                assert isinstance(found.crdt, YDoc)
                return found.type, found.epoch, found.seq, found.crdt.encoded()

            taken = await service.durable_read(ns, crdt_id, take)
            if taken is None:
                raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
            type_name, epoch, seq, encoded = taken
        try:
            if len(encoded) < ROOT_READ_THREAD_BYTES:
                value, content_as = read_root_view(encoded, name, kind)
            else:
                value, content_as = await in_root_read_thread(encoded, name, kind)
        except ViewTooDeep as exc:
            raise bad_request(
                f"root: {name!r} read as {kind} is {exc}, more than a JSON view holds; "
                "read the whole document with ?format=crdt and decode it with a Yjs library"
            ) from None
        answer = {
            "id": crdt_id,
            "type": type_name,
            "seq": seq,
            "epoch": epoch,
            "root": name,
            "as": kind,
            "value": value,
        }
        if content_as:
            # A Yjs update does not say which kind a root is: a map read as
            # text (the default) is empty. Say which kinds show its content
            # (only an empty value has them), or the reader takes the root
            # for empty.
            answer["content_as"] = content_as
        return json_response(answer)

    def ops(request: Request) -> Deferred | Awaitable[Response]:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = authenticated(auth, request, ns)
        body = request.json(json_max_depth)
        try:
            check_ops_named(crdt_id, body)
        except ApiError:
            # The permission's 403 comes before the ops' shapes (docs/http-api.md,
            # "Applying ops"), as for a refusal of the engine's plan.
            auth.check_may_write(principal, crdt_id)
            if "return" in request.known_query(OPS_PARAMS):
                auth.check_read(principal, crdt_id)
            raise
        if request.query_string:
            query = request.known_query(OPS_PARAMS)
            # Checked before anything is applied: a refused request changes nothing.
            check_return(query)
            if "origin" in query:
                # The batch's origin: on every op that names none of its own.
                body = with_origin(body, check_origin(query["origin"], error=bad_request))
            if "return" in query:
                # The answer holds the state, a read: the read permission too,
                # before anything is applied.
                auth.check_read(principal, crdt_id)
                return ops_with_state(request, ns, crdt_id, body, principal)
        try:
            soon = service.apply_soon(ns, crdt_id, body, principal)
        except ApiError as exc:
            raise with_type_list(exc) from None
        if soon is None:  # the CRDT must be loaded first, or the store orders ops itself
            return ops_later(request, ns, crdt_id, body, principal)
        result, durable = soon

        def durable_answer(future: asyncio.Future[Any]) -> Response:
            try:
                service.settle(result, future, "http")
            except ApiError as exc:
                raise with_type_list(exc) from None
            return answer(request, ns, crdt_id, result)

        return Deferred(durable, durable_answer)

    async def ops_later(
        request: Request, ns: str, crdt_id: str, body: Any, principal: Principal
    ) -> Response:
        try:
            result = await service.apply_ops(ns, crdt_id, body, principal, "http")
        except ApiError as exc:
            raise with_type_list(exc) from None
        return answer(request, ns, crdt_id, result)

    async def ops_with_state(
        request: Request, ns: str, crdt_id: str, body: Any, principal: Principal
    ) -> Response:
        """``?return=state``: the answer reads the CRDT once its ops are durable,
        and where what it reads is durable: ops applied after them may still
        be in flight, and are waited for (``CrdtService.durable_read``). An eviction
        pass may choose it meanwhile and let it go when the same durability
        arrives, and the answer then said ``"state": null`` for a CRDT that
        exists; held (``Residency.hold``) from before its ops apply until the
        answer has read it, it stays."""
        residency = service.residency
        residency.hold(ns, crdt_id)
        try:
            try:
                result = await service.apply_ops(ns, crdt_id, body, principal, "http")
            except ApiError as exc:
                raise with_type_list(exc) from None
            state = await service.durable_read(ns, crdt_id, lambda: engine.read(ns, crdt_id))
        finally:
            residency.release(ns, crdt_id)
        return answer(request, ns, crdt_id, result, state)

    def answer(
        request: Request, ns: str, crdt_id: str, result: ApplyResult, state: Any = _NOT_ASKED
    ) -> Response:
        if not result.extra and not result.duplicate and not request.query_string:
            # The common answer, written directly: JSON-encoding this small
            # map was a tenth of a whole increment's cost.
            return Response(
                200, b'{"ok":true,"seq":%d,"applied":%d}' % (result.seq, result.applied)
            )
        fields: dict[str, Any] = {"ok": True, "seq": result.seq, "applied": result.applied}
        if result.extra:
            fields.update(result.extra)
        if result.duplicate:
            fields["duplicate"] = True
        if state is not _NOT_ASKED:
            fields["state"] = state
        return json_response(fields)

    async def listing(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        query = parse_listing_query(request)
        items, cursor = await service.list_ids(
            ns,
            prefix=query.prefix,
            after=query.cursor,
            limit=query.limit,
            visible=lambda crdt_id: auth.can_read(principal, crdt_id),
        )
        return json_response({"crdts": items, "next": cursor})

    async def delete(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = authenticated(auth, request, ns)
        auth.check_admin(principal, ns)
        if not await service.delete(ns, crdt_id):
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return Response(204, b"", None)

    router.add("GET", "/v1/namespaces/{ns}/crdts", listing)
    router.add("GET", "/v1/namespaces/{ns}/crdts/{id}", read)
    router.add("DELETE", "/v1/namespaces/{ns}/crdts/{id}", delete, admin_guard(auth))
    router.add("POST", "/v1/namespaces/{ns}/crdts/{id}/ops", ops, ops_guard(auth))
