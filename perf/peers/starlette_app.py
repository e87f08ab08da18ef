"""Peer: the framework stack users would otherwise pick — uvicorn + Starlette.

The same in-memory work as a syncd gcounter increment without durability:
parse the JSON op, check it, add to a per-client map, answer JSON.
Usage: python -m perf.peers.starlette_app PORT [h11|httptools]
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

COUNTERS: dict[tuple[str, str], dict[str, int]] = {}
SEQ: dict[tuple[str, str], int] = {}


async def ops(request: Request) -> JSONResponse:
    body = await request.json()
    amount = body.get("amount", 1)
    if body.get("op") != "increment" or not isinstance(amount, int) or amount < 1:
        return JSONResponse({"error": "invalid_op", "message": "bad op"}, status_code=400)
    key = (request.path_params["ns"], request.path_params["id"])
    counts = COUNTERS.setdefault(key, {})
    counts["7"] = counts.get("7", 0) + amount
    SEQ[key] = SEQ.get(key, 0) + 1
    return JSONResponse({"ok": True, "seq": SEQ[key], "applied": 1})


app = Starlette(routes=[Route("/v1/namespaces/{ns}/crdts/{id}/ops", ops, methods=["POST"])])

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
