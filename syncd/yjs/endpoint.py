"""``GET /v1/namespaces/:ns/yjs/:room``: the y-websocket protocol, and
``GET /v1/namespaces/:ns/hocuspocus``: the Hocuspocus protocol (docs/yjs.md).

``new WebsocketProvider("ws://HOST/v1/namespaces/NS/yjs", room, doc,
{ params: { token } })`` connects here unchanged: y-websocket appends the
room name to the URL and the params as a query string. The room is a Yjs
document's id; a room name without a type prefix means the ``yd:`` document
of that name (``notes`` is ``yd:notes``), so apps keep their room names.

Everything that can refuse the connection happens here, while it is still
HTTP: the namespace and room, the token (``?token=`` or ``Authorization:
Bearer``, counted against the rate limit), read permission on the document,
the ``?origin=`` its updates are recorded with,
the handshake headers, and room for one more connection. A token that may
read but not write connects read-only. The Hocuspocus upgrade needs no token:
its provider authenticates each document in band (:mod:`syncd.yjs.hocuspocus`).
"""

from __future__ import annotations

from typing import Any, Final

from syncd.crdt.types import type_for_id
from syncd.crdt.validate import check_origin
from syncd.crdt.ydoc import YDoc
from syncd.errors import bad_request, type_mismatch
from syncd.http.request import Request
from syncd.http.response import Upgrade
from syncd.http.router import Router
from syncd.ids import check_crdt_id, check_namespace
from syncd.ws.base_connection import ConnectionTimers
from syncd.ws.handshake import check_room_for_one_more, check_upgrade, switching_head
from syncd.yjs.channel import YjsContext, may_write
from syncd.yjs.connection import YjsConnection
from syncd.yjs.hocuspocus import HocuspocusConnection

YJS_PATH = "/v1/namespaces/{ns}/yjs/{room}"
HOCUSPOCUS_PATH = "/v1/namespaces/{ns}/hocuspocus"


def document_id(room: str) -> str:
    """The Yjs document a room name means (see the module docstring)."""
    kind = type_for_id(room)
    if kind is None:
        return check_crdt_id(YDoc.PREFIX + room)
    if kind != YDoc.TYPE:
        raise type_mismatch(f"room: {room!r} is a {kind}, not a Yjs document (yd:)")
    return check_crdt_id(room)


YJS_PARAMS: Final = ("token", "origin")
HOCUSPOCUS_PARAMS: Final = ("origin",)
"""What each upgrade takes from its query, each at most once
(docs/http-api.md#conventions): a parameter given twice is 400 before the
upgrade, since a proxy or log filter may have read the other copy. The
providers send each once (y-websocket's and Hocuspocus's ``params`` are an
object); the y-websocket room is in the path."""


def origin_of(query: dict[str, str]) -> str | None:
    """The connection's ``?origin=`` (docs/yjs.md#attribution), checked while
    the request is still HTTP: every update it sends is recorded with it."""
    if "origin" not in query:
        return None
    return check_origin(query["origin"], error=bad_request)


def register(router: Router, ctx: YjsContext) -> None:
    timers = ConnectionTimers(ctx.settings.ws_ping_s)

    def upgrade(request: Request) -> Upgrade:
        ns = check_namespace(request.params["ns"])
        crdt_id = document_id(request.params["room"])
        auth = ctx.auth
        query = request.known_query(YJS_PARAMS)
        principal = auth.authenticate(
            request.headers.get("authorization"), ns, query_token=query.get("token")
        )
        auth.check_read(principal, crdt_id)
        writable = may_write(auth, principal, crdt_id)
        origin = origin_of(query)
        key = check_upgrade(request.http_version, request.headers)
        check_room_for_one_more(ctx.server())

        def attach(transport: Any, trailing: bytes) -> YjsConnection:
            return YjsConnection(
                ctx,
                transport,
                trailing,
                timers,
                ns,
                crdt_id,
                principal,
                writable=writable,
                origin=origin,
            )

        return Upgrade(switching_head(key), attach)

    def hocuspocus_upgrade(request: Request) -> Upgrade:
        # No token here: Hocuspocus authenticates each document in band.
        ns = check_namespace(request.params["ns"])
        origin = origin_of(request.known_query(HOCUSPOCUS_PARAMS))
        key = check_upgrade(request.http_version, request.headers)
        check_room_for_one_more(ctx.server())

        def attach(transport: Any, trailing: bytes) -> HocuspocusConnection:
            return HocuspocusConnection(ctx, transport, trailing, timers, ns, document_id, origin)

        return Upgrade(switching_head(key), attach)

    router.add("GET", YJS_PATH, upgrade)
    router.add("GET", HOCUSPOCUS_PATH, hocuspocus_upgrade)
