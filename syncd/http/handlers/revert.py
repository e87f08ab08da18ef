"""``POST /v1/namespaces/:ns/crdts/:id/revert`` (docs/revert.md): take back
one writer's ops. The body is checked here; the work is syncd/revert.py's."""

from __future__ import annotations

from typing import Any, Final

from syncd.auth.authenticator import Authenticator
from syncd.auth.tokens import MAX_CLIENT_ID
from syncd.crdt.validate import check_origin, json_int
from syncd.errors import bad_request
from syncd.history.reads import Writer
from syncd.http.handlers.guards import authenticated, may_write_guard
from syncd.http.handlers.history import MAX_OP_ID
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_crdt_id, check_namespace
from syncd.revert import RevertService

FIELDS: Final = ("client_id", "origin", "since_seq", "until_seq", "op_id")
"""A revert body's fields. Each is optional, and absent means its default:
``null`` is no value of any of them (the document types each as a string or
an integer) and is refused naming the field, not read as absent. Read as
absent, ``{"client_id": 8, "origin": null}`` took back all of client 8's
ops, where its caller had meant to narrow them to one origin."""


def _seq(body: dict[str, Any], name: str, low: int) -> int | None:
    if name not in body:
        return None
    value = json_int(body[name])
    if value is None or value < low:
        raise bad_request(f"{name}: an integer seq of at least {low} is required")
    return value


def parse_body(body: Any) -> tuple[Writer, int | None, int | None, str | None]:
    """The writer, since_seq, until_seq and op_id of a revert body; 400 otherwise."""
    if type(body) is not dict:
        raise bad_request('body: an object such as {"client_id": 42} or {"origin": "..."}')
    unknown = sorted(str(key) for key in body if key not in FIELDS)
    if unknown:
        raise bad_request(f"{unknown[0]}: unknown field; a revert takes {', '.join(FIELDS)}")
    if body.get("client_id") is None and body.get("origin") is None:
        raise bad_request("client_id, origin: a revert names whose ops to take back (one or both)")
    client_id = None
    if "client_id" in body:
        client_id = json_int(body["client_id"])
        if client_id is None or not 0 <= client_id <= MAX_CLIENT_ID:
            raise bad_request(f"client_id: an integer from 0 to {MAX_CLIENT_ID} is required")
    origin = None
    if "origin" in body:
        origin = check_origin(body["origin"], error=bad_request)
    since = _seq(body, "since_seq", 1)
    until = _seq(body, "until_seq", 0)
    if since is not None and until is not None and until < since:
        raise bad_request(f"until_seq: {until} is before since_seq {since}")
    op_id = body.get("op_id")
    if "op_id" in body and (type(op_id) is not str or not 1 <= len(op_id) <= MAX_OP_ID):
        raise bad_request(f"op_id: must be a string of 1 to {MAX_OP_ID} characters")
    return Writer(client_id, origin), since, until, op_id


def register(
    router: Router, *, auth: Authenticator, reverts: RevertService, json_max_depth: int
) -> None:
    async def revert(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = authenticated(auth, request, ns)
        body = request.json(json_max_depth)
        # Write permission on the id before what the body says (after its
        # JSON), as the ops route orders them (docs/http-api.md, "Applying
        # ops"): a token that may not write the id is 403 whatever the body
        # holds, with Expect (its guard, before the 100) or without. First
        # without the type: an id it may not write is 403 even when absent.
        auth.check_may_write(principal, crdt_id)
        writer, since, until, op_id = parse_body(body)
        # With the type, before any work (each op is checked again).
        auth.check_write(principal, crdt_id, await reverts.type_of(ns, crdt_id), 0)
        return json_response(
            await reverts.revert(ns, crdt_id, writer, since, until, principal, op_id, "http")
        )

    router.add("POST", "/v1/namespaces/{ns}/crdts/{id}/revert", revert, may_write_guard(auth))
