"""History routes (docs/http-api.md#history-and-restore): a CRDT's retained ops
(all, or one writer's: ``?client_id=``, ``?origin=``), its state at a seq
(``?at=`` on the read route, in crdts.py) and restore."""

from __future__ import annotations

from typing import Any, Final

from syncd.auth.authenticator import Authenticator
from syncd.auth.tokens import MAX_CLIENT_ID
from syncd.crdt.engine import OP_ID_MAX_LEN
from syncd.crdt.validate import check_origin, json_int
from syncd.errors import bad_request
from syncd.history.reads import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, Writer
from syncd.history.service import HistoryService
from syncd.http.handlers.guards import authenticated, may_write_guard
from syncd.http.request import Request, decimal_digits
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_crdt_id, check_namespace

MAX_OP_ID = OP_ID_MAX_LEN - 8
"""A restore's ops carry ``<op_id>/<i>``: room for the suffix."""

_MAX_SEQ_DIGITS = 18
"""A seq is a signed 64-bit integer in the stores; longer text is not one."""

MAX_QUERY_SEQ: Final = 10**_MAX_SEQ_DIGITS - 1
"""The largest seq a query may name (``?at=``, ``?before=``), as the OpenAPI document says."""

HISTORY_PARAMS: Final = ("before", "limit", "client_id", "origin")
RESTORE_FIELDS: Final = ("seq", "op_id")

_OTHER_ROUTES_PAGING: Final = ("since", "at", "cursor")
"""What the event stream (``since``), the read (``at``) and the listing
(``cursor``) take, and ``/history`` does not: a client that sends one means a
page it would not get, so it is refused instead of answered with the newest."""


def parse_seq(text: str | None, name: str) -> int:
    """A seq in a query (0 to ``MAX_QUERY_SEQ``), or 400 naming it."""
    digits = decimal_digits(text) if text is not None else None
    if digits is None or len(digits) > _MAX_SEQ_DIGITS:
        raise bad_request(f"{name}: an integer seq from 0 to {MAX_QUERY_SEQ} is required")
    return int(digits)


def parse_limit(text: str, most: int = MAX_HISTORY_LIMIT) -> int:
    """A page size in ``?limit=`` (1 to ``most``: ``/history``'s, or the
    listing's), or 400 naming it."""
    digits = decimal_digits(text)
    if (
        digits is None
        or len(digits) > len(str(most))  # so int() never sees a huge text
        or not 1 <= int(digits) <= most
    ):
        raise bad_request(f"limit: an integer from 1 to {most} is required")
    return int(digits)


def parse_client_id(text: str) -> int:
    """A ``?client_id=`` filter: a client id (0 to ``MAX_CLIENT_ID``), or 400."""
    digits = decimal_digits(text)
    if digits is None or len(digits) > _MAX_SEQ_DIGITS:
        raise bad_request(f"client_id: an integer from 0 to {MAX_CLIENT_ID} is required")
    value = int(digits)
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
        query = request.known_query(HISTORY_PARAMS) if request.query_string else {}
        for name in _OTHER_ROUTES_PAGING:
            if name in query:
                raise bad_request(
                    f"{name}: not a /history parameter; pages go newest first, "
                    "each older one from before=<the previous page's next>"
                )
        before = parse_seq(query["before"], "before") if "before" in query else None
        limit = parse_limit(query["limit"]) if "limit" in query else DEFAULT_HISTORY_LIMIT
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
        principal = authenticated(auth, request, ns)
        body: Any = request.json(json_max_depth)
        # Write permission on the id before what the body says (after its
        # JSON), as the ops route orders them (docs/http-api.md, "Applying
        # ops"): a token that may not write the id is 403 whatever the body
        # holds, with Expect (its guard, before the 100) or without. First
        # without the type: an id it may not write is 403 even when absent.
        auth.check_may_write(principal, crdt_id)
        if type(body) is not dict:
            raise bad_request('body: an object {"seq": N} is required')
        unknown = sorted(str(key) for key in body if key not in RESTORE_FIELDS)
        if unknown:  # a misspelt op_id would otherwise make a retry apply twice
            fields = ", ".join(RESTORE_FIELDS)
            raise bad_request(f"{unknown[0]}: unknown field; a restore takes {fields}")
        seq = json_int(body.get("seq"))
        if seq is None or seq < 0:
            raise bad_request("seq: a non-negative integer is required")
        op_id = body.get("op_id")
        # Absent is no op_id; null is no string, and refused as one (revert.FIELDS).
        if "op_id" in body and (type(op_id) is not str or not 1 <= len(op_id) <= MAX_OP_ID):
            raise bad_request(f"op_id: must be a string of 1 to {MAX_OP_ID} characters")
        # With the type, before any work (each op is checked again).
        auth.check_write(principal, crdt_id, await history.type_of(ns, crdt_id), 0)
        return json_response(await history.restore(ns, crdt_id, seq, principal, op_id, "http"))

    router.add("GET", "/v1/namespaces/{ns}/crdts/{id}/history", listing)
    router.add("POST", "/v1/namespaces/{ns}/crdts/{id}/restore", restore, may_write_guard(auth))
