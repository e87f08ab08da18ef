"""An op repeated with a known ``op_id`` applies nothing and answers as the
first time did, ``"duplicate": true`` (docs/data-model.md#op-ids), at a
quota's limit too. Found by probing: the quotas counted a repeat's growth
like a new op's, so the retry of an op whose answer was lost, the op that
filled its CRDT or namespace, got 413 ``crdt_too_large`` or 403
``quota_exceeded``: the client was told its applied op had been refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op

BIG = 1200
"""An element that takes its CRDT past half of either limit below."""


@pytest.mark.parametrize(
    ("limits", "status", "error"),
    [
        ({"max_crdt_bytes": 2000}, 413, "crdt_too_large"),
        ({"namespace_max_bytes": 2000}, 403, "quota_exceeded"),
    ],
)
async def test_a_repeat_at_the_limit_is_answered_as_the_first_time(
    make_server: Any, limits: dict[str, int], status: int, error: str
) -> None:
    server: RunningServer = await make_server(**limits)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        first = {"op": "add", "element": "a" * BIG, "op_id": "fill-1"}
        r = await op(client, h, "or:s", first)
        assert r.status_code == 200, r.text
        seq = r.json()["seq"]
        # The retry of an op whose answer was lost.
        r = await op(client, h, "or:s", first)
        assert r.status_code == 200, r.text
        assert r.json() == {"ok": True, "seq": seq, "applied": 1, "duplicate": True}
        # In a batch, beside a new op that fits: the repeat counts nothing.
        r = await op(client, h, "or:s", [first, {"op": "add", "element": "b", "op_id": "small"}])
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 2 and r.json()["duplicate"] is True
        # A new op as large is still refused, and nothing was applied twice.
        r = await op(client, h, "or:s", {**first, "element": "c" * BIG, "op_id": "fill-2"})
        assert r.status_code == status and r.json()["error"] == error, r.text
        state = (await client.get("/v1/namespaces/app/crdts/or:s", headers=h)).json()
        assert sorted(state["value"]) == ["a" * BIG, "b"], state
        usage = await client.get("/v1/namespaces/app/usage", headers=ADMIN_HEADERS)
        assert usage.json()["bytes"] < 2000
