"""``GET /v1/namespaces/:ns/usage`` (admins of the namespace): what the
namespace holds against its quotas (docs/operations.md#quotas)::

    {"ns": "acme", "crdts": 1200, "bytes": 5242880, "unmeasured": 0,
     "limits": {"max_crdts": 100000, "max_bytes": 1073741824,
                "max_crdt_bytes": 67108864}}

A limit of 0 is no limit. ``unmeasured`` counts CRDTs whose size is not
known yet (see syncd/store/catalogue.py); ``bytes`` leaves them out.
"""

from __future__ import annotations

from syncd.auth.authenticator import Authenticator
from syncd.http.request import Request
from syncd.http.response import Response, json_response
from syncd.http.router import Router
from syncd.ids import check_namespace
from syncd.quotas import Limits
from syncd.store.base import Store

PATH = "/v1/namespaces/{ns}/usage"


def register(router: Router, *, auth: Authenticator, store: Store, limits: Limits) -> None:
    async def usage(request: Request) -> Response:
        ns = check_namespace(request.params["ns"])
        principal = auth.authenticate(request.headers.get("authorization"), ns)
        auth.check_admin(principal, ns)
        found = await store.usage(ns)
        return json_response(
            {
                "ns": ns,
                "crdts": found.crdts,
                "bytes": found.bytes,
                "unmeasured": found.unmeasured,
                "limits": {
                    "max_crdts": limits.namespace_max_crdts,
                    "max_bytes": limits.namespace_max_bytes,
                    "max_crdt_bytes": limits.max_crdt_bytes,
                },
            }
        )

    router.add("GET", PATH, usage)
