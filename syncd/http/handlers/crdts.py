"""CRDT routes (docs/http-api.md#routes): read, ops, list, delete."""

from __future__ import annotations

from typing import Any, Final

from syncd.auth.authenticator import Authenticator
from syncd.crdt.engine import Engine
from syncd.errors import bad_request, not_found
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_crdt_id, check_namespace
from syncd.service import CrdtService

MAX_LIST_LIMIT: Final = 1000
DEFAULT_LIST_LIMIT: Final = 100


def register(
    router: Router,
    *,
    auth: Authenticator,
    engine: Engine,
    service: CrdtService,
    json_max_depth: int,
) -> None:

    def read(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_read(principal, crdt_id)
        full = request.query_string != "" and request.query.get("format") == "crdt"
        view = engine.read(ns, crdt_id, full=full)
        if view is None:
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return json_response(view)

    async def ops(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        body = request.json(json_max_depth)
        result = await service.apply_ops(ns, crdt_id, body, principal, "http")
        if not result.extra and not result.duplicate and not request.query_string:
            # The common answer, written directly: JSON-encoding this small
            # map was a tenth of a whole increment's cost.
            return Response(
                200, b'{"ok":true,"seq":%d,"applied":%d}' % (result.seq, result.applied)
            )
        answer: dict[str, Any] = {"ok": True, "seq": result.seq, "applied": result.applied}
        if result.extra:
            answer.update(result.extra)
        if result.duplicate:
            answer["duplicate"] = True
        if request.query_string and request.query.get("return") == "state":
            answer["state"] = engine.read(ns, crdt_id)
        return json_response(answer)

    def listing(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        query = request.query if request.query_string else {}
        limit_text = query.get("limit", str(DEFAULT_LIST_LIMIT))
        if (
            not (limit_text.isascii() and limit_text.isdigit())
            or len(limit_text) > len(str(MAX_LIST_LIMIT))  # int() refuses 4300+ digits
            or not 1 <= int(limit_text) <= MAX_LIST_LIMIT
        ):
            raise bad_request(f"limit must be an integer from 1 to {MAX_LIST_LIMIT}")
        items, cursor = engine.list_ids(
            ns,
            prefix=query.get("prefix", ""),
            after=query.get("cursor") or None,
            limit=int(limit_text),
            visible=lambda crdt_id: auth.can_read(principal, crdt_id),
        )
        return json_response({"crdts": items, "next": cursor})

    async def delete(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_admin(principal, ns)
        if not await service.delete(ns, crdt_id):
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return Response(204, b"", None)

    router.add("GET", "/v1/namespaces/{ns}/crdts", listing)
    router.add("GET", "/v1/namespaces/{ns}/crdts/{id}", read)
    router.add("DELETE", "/v1/namespaces/{ns}/crdts/{id}", delete)
    router.add("POST", "/v1/namespaces/{ns}/crdts/{id}/ops", ops)
