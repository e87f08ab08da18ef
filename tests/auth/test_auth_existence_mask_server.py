"""Restore and revert answer 403 for an id the token may not write whether
or not it exists, also when the deciding write rule's mask holds no op of
the type the id's prefix fixes (``"o": 2`` on a ``gc:`` id: a gcounter has
only 0x01) or of any type (``"o": 128``): the check made before the route
looks the id up took such a mask as one that might allow some op, so an
existing id was 403 (the check with its type) and an absent one 404, which
told a token that may not even read the id whether it exists."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue

NS = "app"
ROUTES: dict[str, Any] = {
    "restore": {"seq": 0},
    "revert": {"client_id": 1},
}


@pytest.mark.parametrize("http_parser", ["h11"], indirect=True)
@pytest.mark.parametrize("mask", [0x02, 0x0C, 0x10, 0x80, 0xF0])
async def test_an_absent_id_is_403_like_an_existing_one(server: RunningServer, mask: int) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(
            f"/v1/namespaces/{NS}/crdts/gc:secret/ops",
            json={"op": "increment"},
            headers=ADMIN_HEADERS,
        )
        assert r.status_code == 200, r.text
        headers = await issue(
            client, NS, 9, rules={"r": [{"p": "gc:public"}], "w": [{"p": "*", "o": mask}]}
        )
        for route, body in ROUTES.items():
            answers = {}
            for crdt_id in ("gc:secret", "gc:absent"):
                r = await client.post(
                    f"/v1/namespaces/{NS}/crdts/{crdt_id}/{route}", json=body, headers=headers
                )
                answers[crdt_id] = (r.status_code, r.json()["error"])
            assert answers == {
                "gc:secret": (403, "forbidden"),
                "gc:absent": (403, "forbidden"),
            }, (route, answers)
