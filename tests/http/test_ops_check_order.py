"""The ops route's checks in the documented order (docs/http-api.md, "Applying
ops"), on a real server: 403 when the token may write no op on the id (or,
with ``?return=state``, may not read it) comes before the ops' shapes (400).

An op without its ``op`` field was refused (400 ``invalid_op``, naming the
type's ops) before the permission was looked at, so a token that may not
use an id got a 400 where every other malformed op gets the 403."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import issue, op

MISSING_OP: list[Any] = [{"amount": 1}, [{"op": "increment"}, {"amount": 1}]]


@pytest.mark.parametrize("body", MISSING_OP)
async def test_an_op_without_its_name_on_an_id_it_may_not_write_is_403(
    server: RunningServer, body: Any
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = await issue(client, read=["*"], write=["gc:mine-*"])
        r = await op(client, token, "gc:theirs", body)
        assert (r.status_code, r.json()["error"]) == (403, "forbidden"), r.text
        # The same as a well-formed op on that id gets.
        r = await op(client, token, "gc:theirs", {"op": "increment"})
        assert (r.status_code, r.json()["error"]) == (403, "forbidden"), r.text
        # On an id it may write, the missing name is still the answer.
        r = await op(client, token, "gc:mine-1", body)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_op"), r.text


@pytest.mark.parametrize("body", MISSING_OP)
async def test_return_state_without_read_permission_is_403_before_the_shape(
    server: RunningServer, body: Any
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = await issue(client, read=["gc:other"], write=["*"])
        r = await op(client, token, "gc:a", body, query="?return=state")
        assert (r.status_code, r.json()["error"]) == (403, "forbidden"), r.text
        r = await op(client, token, "gc:a", body)
        assert (r.status_code, r.json()["error"]) == (400, "invalid_op"), r.text
