"""``GET /v1/openapi.json``: the API description, no authentication.

The document is a file of the package (``syncd/openapi.json``), kept in the
repository and tested against the router and the running server. It is read
once when the app is built and the same bytes are served every time.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from syncd.http.request import Request
from syncd.http.response import JSON_TYPE, Response
from syncd.http.router import Router

OPENAPI_PATH: Final = "/v1/openapi.json"
DOCUMENT_NAME: Final = "openapi.json"


def load_document() -> bytes:
    """The document's bytes as shipped in the package."""
    return resources.files("syncd").joinpath(DOCUMENT_NAME).read_bytes()


def register(router: Router) -> None:
    response = Response(200, load_document(), JSON_TYPE)

    def openapi(_: Request) -> Response:
        return response

    router.add("GET", OPENAPI_PATH, openapi)
