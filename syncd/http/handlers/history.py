"""History routes (docs/http-api.md#history-and-restore): a CRDT's retained ops
(all, or one writer's: ``?client_id=``, ``?origin=``), its state at a seq
(``?at=`` on the read route, in crdts.py) and restore."""

from __future__ import annotations

from typing import Any

from syncd.auth.authenticator import Authenticator
from syncd.auth.tokens import MAX_CLIENT_ID
from syncd.crdt.engine import OP_ID_MAX_LEN
from syncd.crdt.validate import check_origin, json_int
from syncd.errors import bad_request
from syncd.history.reads import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, Writer
from syncd.history.service import HistoryService
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_crdt_id, check_namespace

MAX_OP_ID = OP_ID_MAX_LEN - 8
"""A restore's ops carry ``<op_id>/<i>``: room for the suffix."""

_MAX_SEQ_DIGITS = 18
"""A seq is a signed 64-bit integer in the stores; longer text is not one."""


def parse_seq(text: str | None, name: str) -> int:
    """A non-negative integer query or body value, or 400 naming it."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > _MAX_SEQ_DIGITS:
        raise bad_request(f"{name}: a non-negative integer seq is required")
    return int(text)


def parse_client_id(text: str) -> int:
    """A ``?client_id=`` filter: a client id (0 to ``MAX_CLIENT_ID``), or 400."""
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_SEQ_DIGITS:
        raise bad_request(f"client_id: an integer from 0 to {MAX_CLIENT_ID} is required")
    value = int(text)
    if value > MAX_CLIENT_ID:
        raise bad_request(f"client_id: an integer from 0 to {MAX_CLIENT_ID} is required")
    return value


def register(
    router: Router,
    *,
    auth: Authenticator,
    history: HistoryService,
    json_max_depth: int,
) -> None:
    async def listing(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_read(principal, crdt_id)
        query = request.query if request.query_string else {}
        before = parse_seq(query["before"], "before") if "before" in query else None
        limit = DEFAULT_HISTORY_LIMIT
        if "limit" in query:
            limit = parse_seq(query["limit"], "limit")
            if not 1 <= limit <= MAX_HISTORY_LIMIT:
                raise bad_request(f"limit must be an integer from 1 to {MAX_HISTORY_LIMIT}")
        writer = None
        if "client_id" in query or "origin" in query:
            writer = Writer(
                parse_client_id(query["client_id"]) if "client_id" in query else None,
                check_origin(query["origin"], error=bad_request) if "origin" in query else None,
            )
        return json_response(await history.page(ns, crdt_id, before, limit, writer))

    async def restore(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        body: Any = request.json(json_max_depth)
        if type(body) is not dict:
            raise bad_request('body: an object {"seq": N} is required')
        seq = json_int(body.get("seq"))
        if seq is None or seq < 0:
            raise bad_request("seq: a non-negative integer is required")
        op_id = body.get("op_id")
        if op_id is not None and (type(op_id) is not str or not 1 <= len(op_id) <= MAX_OP_ID):
            raise bad_request(f"op_id: must be a string of 1 to {MAX_OP_ID} characters")
        # Write permission on the id, before any work (each op is checked again).
        # First without the type: an id it may not write is 403 even when absent.
        auth.check_may_write(principal, crdt_id)
        auth.check_write(principal, crdt_id, await history.type_of(ns, crdt_id), 0)
        return json_response(await history.restore(ns, crdt_id, seq, principal, op_id, "http"))

    router.add("GET", "/v1/namespaces/{ns}/crdts/{id}/history", listing)
    router.add("POST", "/v1/namespaces/{ns}/crdts/{id}/restore", restore)
