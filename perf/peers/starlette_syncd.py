"""Peer: uvicorn + Starlette doing syncd's work through syncd's own objects.

The same-work peer of issue #35: what syncd would cost built on the
framework stack users would otherwise pick. Its op route does what syncd's
does, with syncd's objects: the token verified (cached) and rate-limited by
syncd's ``Authenticator``, the body read by syncd's JSON rules, the op
applied by ``CrdtService.apply_ops`` (plan, authorize, engine, quotas,
residency, the embedded store's group commit, durable per ``SERVICE_FSYNC``,
then fan-out, metrics), and the same answer. Only the HTTP layer differs:
uvicorn's protocol and Starlette's routing, request and response objects
instead of syncd's. Settings come from the environment as ``python -m
syncd`` reads them (``SERVICE_DATA_DIR``, ``SERVICE_SIGNING_KEY``,
``SERVICE_FSYNC``, ...). The process keeps CPython's collector settings (a
framework user would; syncd's own are syncd/collector.py).

Only ``POST /v1/namespaces/{ns}/crdts/{id}/ops``: mint its tokens with the
signing key (``perf.studies.op_cpu`` does).

Usage: python -m perf.peers.starlette_syncd PORT [h11|httptools]
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from syncd.app import App
from syncd.config import from_env
from syncd.crdt.types import check_ops_named, with_type_list
from syncd.errors import ApiError
from syncd.http.request import JSON_MEDIA_TYPE, parse_json
from syncd.ids import check_crdt_id, check_namespace

SETTINGS = from_env()
APP = App(SETTINGS)


def error(exc: ApiError) -> JSONResponse:
    return JSONResponse(
        {"error": exc.code, "message": exc.message, **(exc.extra or {})},
        status_code=exc.status,
        headers=dict(exc.headers),
    )


async def ops(request: Request) -> Response:
    try:
        ns = check_namespace(request.path_params["ns"])
        crdt_id = check_crdt_id(request.path_params["id"])
        principal = APP.auth.authenticate(request.headers.get("authorization"), ns)
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != JSON_MEDIA_TYPE:
            raise ApiError(415, "unsupported_media_type", "body must be application/json")
        body = parse_json(await request.body(), SETTINGS.json_max_depth)
        check_ops_named(crdt_id, body)
        try:
            result = await APP.service.apply_ops(ns, crdt_id, body, principal, "http")
        except ApiError as exc:
            raise with_type_list(exc) from None
    except ApiError as exc:
        return error(exc)
    return Response(
        b'{"ok":true,"seq":%d,"applied":%d}' % (result.seq, result.applied),
        media_type="application/json",
    )


@asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    await APP.start()
    try:
        yield
    finally:
        await APP.close()


app = Starlette(
    routes=[Route("/v1/namespaces/{ns}/crdts/{id}/ops", ops, methods=["POST"])],
    lifespan=lifespan,
)

if __name__ == "__main__":
    http = sys.argv[2] if len(sys.argv) > 2 else "httptools"
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        http=http,
        loop="uvloop",
        log_level="warning",
        access_log=False,
    )
