"""A restore brings back the form a read showed, not just the identity: a
set element added as ``1.0`` and now read as ``1`` (one identity, read in
the form of the add that made it) reads ``1.0`` again after a restore to
when it did, as a register's and a tree node's values do."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


def shown(read: httpx.Response) -> str:
    """A read's value as the JSON text it came in (1 == 1.0 in Python, not on the wire)."""
    return read.text[read.text.index('"value":') :]


@pytest.mark.parametrize(
    ("then", "now"),
    [(1.0, 1), (1, 1.0), ({"a": [2.0]}, {"a": [2]}), (-0.0, 0)],
    ids=["float-then", "int-then", "nested", "negative-zero"],
)
async def test_a_restore_reads_the_element_in_its_form_then(
    server: RunningServer, then: Any, now: Any
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for body in (
            {"op": "add", "element": then},
            {"op": "remove", "element": now},
            {"op": "add", "element": now},
        ):
            assert (await op(client, h, "or:forms", body)).is_success
        past = await client.get(f"{BASE}/or:forms?at=1", headers=h)
        current = await client.get(f"{BASE}/or:forms", headers=h)
        assert past.json()["value"] == [then]
        assert shown(current) != shown(past)

        r = await client.post(f"{BASE}/or:forms/restore", json={"seq": 1}, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["applied"] == 2
        restored = await client.get(f"{BASE}/or:forms", headers=h)
        assert shown(restored) == shown(past)

        # Where it is already read as then, a restore applies nothing.
        again = await client.post(f"{BASE}/or:forms/restore", json={"seq": 1}, headers=h)
        assert again.json()["applied"] == 0, again.text
