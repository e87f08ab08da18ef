"""Guards: what a route checks of a request's head alone, before a ``100 Continue``.

A client that sends ``Expect: 100-continue`` waits for the 100 before it
uploads its body. RFC 9110 10.1.1 lets a server answer the final status
instead when it will refuse the request anyway: a missing, bad, expired or
revoked token (401), a token for another namespace or without the route's
permission (403), or a client over its rate (429) is told so at once, and
never uploads a body for nothing. The connection runs a route's guard
(:data:`syncd.http.router.Guard`) only for such a request; every other
request goes straight to its handler, which checks as it always has.

A guard authenticates, which counts the token's rate, so it leaves the
principal on the request and the handler takes it from there
(:func:`authenticated`) rather than counting the same request twice.

Every route a client may send a body to has one, whether or not it reads
the body: the ops, restore, revert, token and revocation routes, the
backup (root admin; it reads no body, but a client may send one) and the
DELETE routes (namespace admin, as their handlers check). A guard checks
only what its handler would refuse whatever the body: the ops route's
query too (``?origin=``, ``?return=`` and the read permission it needs).
"""

from __future__ import annotations

from syncd.auth.authenticator import Authenticator, Principal
from syncd.http.request import Request
from syncd.http.router import Guard
from syncd.ids import check_crdt_id, check_namespace


def authenticated(auth: Authenticator, request: Request, ns: str | None) -> Principal:
    """The request's principal: the one its guard found (checked again for
    expiry and revocation, which the body's upload may have outlasted), else
    authenticated now."""
    principal: Principal | None = request.principal
    if principal is None:
        return auth.authenticate(request.headers.get("authorization"), ns)
    auth.check_expiry(principal)
    return principal


def may_write_guard(auth: Authenticator) -> Guard:
    """For a route on ``{ns}/crdts/{id}`` that writes: a token of the
    namespace that some write to the id may be allowed to (its type and the
    ops are checked by the handler, with the body)."""

    def guard(request: Request) -> None:
        ns = check_namespace(request.params["ns"])
        crdt_id = check_crdt_id(request.params["id"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_may_write(principal, crdt_id)
        request.principal = principal

    return guard


def admin_guard(auth: Authenticator) -> Guard:
    """For an admin route on ``{ns}``: an admin token of the namespace."""

    def guard(request: Request) -> None:
        ns = check_namespace(request.params["ns"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_admin(principal, ns)
        request.principal = principal

    return guard


def root_admin_guard(auth: Authenticator) -> Guard:
    """For a route of the server as a whole (``/v1/admin/backup``): the root admin."""

    def guard(request: Request) -> None:
        principal = auth.authenticate(request.headers.get("authorization"), None)
        auth.check_admin(principal, None)
        request.principal = principal

    return guard


def own_admin_guard(auth: Authenticator) -> Guard:
    """For an admin route without a namespace in its path (``/v1/tokens``):
    an admin token of its own namespace, or the root admin (which the handler
    checks again against the namespace the body names)."""

    def guard(request: Request) -> None:
        principal = auth.authenticate(request.headers.get("authorization"), None)
        auth.check_admin(principal, principal.namespace)
        request.principal = principal

    return guard
