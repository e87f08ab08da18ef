"""A write rule with ``"o": 0`` allows no op at all (docs/permissions.md#op-masks),
nor does one whose mask holds only bits of other types' ops, so it grants no
write permission: restore and revert, which need write
permission for the id (docs/http-api.md), are 403 for a token whose deciding
rule is such a rule, on a real server.

Found by probing: their handlers check the write permission up front with an
empty op mask, and an empty mask fits inside every rule's mask, ``0`` too.
So such a token got 200 for a restore or revert that came to no ops (and an
answer naming the document's current seq)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.http.support import ADMIN_HEADERS, issue, op


# lwwregister has one op, set (0x01): "o": 2 allows none of them either.
@pytest.mark.parametrize("mask", [0, 2])
async def test_a_rule_allowing_no_op_grants_no_restore_or_revert(server: Any, mask: int) -> None:
    deny_registers = {"r": [{"p": "*"}], "w": [{"p": "lw:*", "o": mask}, {"p": "*"}]}
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await op(client, ADMIN_HEADERS, "lw:r", {"op": "set", "value": "v"})
        assert r.status_code == 200, r.text
        seq = r.json()["seq"]
        r = await op(client, ADMIN_HEADERS, "or:c", {"op": "add", "element": "x"})
        assert r.status_code == 200, r.text
        token = await issue(client, client_id=9, rules=deny_registers)
        base = "/v1/namespaces/app/crdts"
        for path, body in [
            (f"{base}/lw:r/restore", {"seq": seq}),  # restores nothing: no op
            (f"{base}/lw:r/revert", {"client_id": 12345}),  # that client wrote nothing
        ]:
            r = await client.post(path, json=body, headers=token)
            assert r.status_code == 403, (path, r.status_code, r.text)
            assert r.json()["error"] == "forbidden"
        # A rule with a mask still allows them: ids the '*' rule decides.
        r = await client.post(f"{base}/or:c/revert", json={"client_id": 12345}, headers=token)
        assert r.status_code == 200, r.text
        r = await client.post(f"{base}/or:missing/restore", json={"seq": 0}, headers=token)
        assert r.status_code == 404, r.text
