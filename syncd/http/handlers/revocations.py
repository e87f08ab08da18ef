"""Revocation routes (docs/permissions.md#revoking-tokens), admins of the namespace only:

- ``POST /v1/namespaces/:ns/revocations`` ``{"client_id", "before_ms"?}``:
  refuse the client's tokens issued before ``before_ms`` (default: now) and
  end what they hold open; answers the revocation once it is durable.
- ``GET /v1/namespaces/:ns/revocations``: the namespace's revocations.
- ``DELETE /v1/namespaces/:ns/revocations/:client_id``: lift one (204; 404
  when there is none).
"""

from __future__ import annotations

from syncd.auth.authenticator import Authenticator
from syncd.auth.revocations import (
    Revocations,
    parse_client_id_text,
    parse_revoke_body,
    revocations_json,
)
from syncd.errors import not_found
from syncd.http.handlers.guards import admin_guard, authenticated
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_namespace

PATH = "/v1/namespaces/{ns}/revocations"


def register(
    router: Router, *, auth: Authenticator, revocations: Revocations, json_max_depth: int
) -> None:
    async def revoke(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = authenticated(auth, request, ns)
        auth.check_admin(principal, ns)
        parsed = parse_revoke_body(request.json(json_max_depth))
        revocation = await revocations.revoke(ns, parsed)
        return json_response(revocation.to_json())

    def listing(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_admin(principal, ns)
        return json_response(revocations_json(revocations.listing(ns)))

    async def lift(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = authenticated(auth, request, ns)
        auth.check_admin(principal, ns)
        client_id = parse_client_id_text(request.params["client_id"])
        if not await revocations.lift(ns, client_id):
            raise not_found(f"no revocation of client {client_id} in namespace {ns!r}")
        return Response(204, b"", None)

    router.add("POST", PATH, revoke, admin_guard(auth))
    router.add("GET", PATH, listing)
    router.add("DELETE", PATH + "/{client_id}", lift, admin_guard(auth))
