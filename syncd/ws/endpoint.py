"""``GET /v1/namespaces/:ns/ws``: the WebSocket upgrade (docs/protocol.md#the-websocket).

Everything that can refuse the connection happens here, while it is still
HTTP, so a refusal is an ordinary HTTP error answer and never an accepted
socket: namespace syntax, the token (``Authorization: Bearer`` or
``?token=``, counted against the rate limit), the handshake headers, and
room for one more connection.
"""

from __future__ import annotations

from typing import Any

from syncd.http.request import Request
from syncd.http.response import Upgrade
from syncd.http.router import Router
from syncd.ids import check_namespace
from syncd.ws.base_connection import ConnectionTimers
from syncd.ws.connection import SessionContext, WsConnection
from syncd.ws.flusher import Flusher
from syncd.ws.handshake import check_room_for_one_more, check_upgrade, switching_head

WS_PATH = "/v1/namespaces/{ns}/ws"


def register(router: Router, app: SessionContext) -> None:
    flusher = Flusher()
    timers = ConnectionTimers(app.settings.ws_ping_s)

    def upgrade(request: Request) -> Upgrade:
        ns = check_namespace(request.params["ns"])
        auth = app.auth
        # ?token= at most once (docs/http-api.md#conventions): 400 before the
        # upgrade, since a proxy or log filter may have read the other copy.
        query_token = request.known_query(("token",)).get("token")
        principal = auth.authenticate(
            request.headers.get("authorization"), ns, query_token=query_token
        )
        key = check_upgrade(request.http_version, request.headers)
        check_room_for_one_more(app.server())

        def attach(transport: Any, trailing: bytes) -> WsConnection:
            return WsConnection(app, transport, trailing, ns, principal, flusher, timers)

        return Upgrade(switching_head(key), attach)

    router.add("GET", WS_PATH, upgrade)
