"""``syncd mcp`` over raw stdio: a request whose id is not a string or an
integer (null, a fraction, a boolean, an object) is answered with a JSON-RPC
invalid request error, null id, instead of being taken for a notification and
left unanswered, against a real server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.client import mcp_support as stdio
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

pytest.importorskip("mcp")


BAD_IDS: list[Any] = [None, 1.5, True, {}, [1]]


async def test_a_request_with_a_bad_id_is_answered(server: RunningServer) -> None:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    async with stdio.mcp_process([*args, "--crdt", "tags:orset"]) as proc:
        await stdio.initialize(proc)
        for bad_id in BAD_IDS:
            await stdio.send(proc, {"jsonrpc": "2.0", "id": bad_id, "method": "tools/list"})
            answer = await stdio.answer(proc)
            assert answer["id"] is None, bad_id
            assert answer["error"]["code"] == -32600, bad_id
            assert "id" in answer["error"]["message"]
        # A notification (no id at all) is still no request, and serving goes on.
        await stdio.send(
            proc, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
        )
        await stdio.send(proc, {"jsonrpc": "2.0", "id": "after", "method": "tools/list"})
        answer = await stdio.answer(proc)
        assert answer["id"] == "after"
        assert answer["result"]["tools"][0]["name"] == "service_read_tags"
