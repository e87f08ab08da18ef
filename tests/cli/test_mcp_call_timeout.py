"""``syncd mcp --call-timeout-s``: the tools of the real command answer a call
the service keeps waiting with the ``timeout`` tool error at that limit, not
at the 30 s default (tests/client/test_client_tools_call_timeout.py has the
limit itself)."""

from __future__ import annotations

import json
import time

from tests.client.conftest import NS, make_token
from tests.client.mcp_support import answer, initialize, mcp_process, send
from tests.client.stalling_proxy import proxy_to
from tests.conftest import RunningServer

LIMIT_S = 1.0
SLACK_S = 2.0
"""How long after the limit the answer may come (a loaded machine, a subprocess)."""


async def test_the_flag_bounds_a_stalled_call(server: RunningServer) -> None:
    async with proxy_to(server) as proxy:
        args = ["--base-url", f"http://127.0.0.1:{proxy.port}", "--token", make_token(3)]
        args += ["--namespace", NS, "--crdt", "gc:hits", "--call-timeout-s", str(LIMIT_S)]
        async with mcp_process(args) as proc:
            await initialize(proc)
            proxy.stall()
            call = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "service_read_gc_hits", "arguments": {}},
            }
            started = time.monotonic()
            await send(proc, call)
            reply = await answer(proc, LIMIT_S + SLACK_S + 5)
            took = time.monotonic() - started
            proxy.resume()
    assert LIMIT_S <= took < LIMIT_S + SLACK_S, took
    result = reply["result"]
    assert result["isError"] is True
    body = json.loads(result["content"][0]["text"])
    assert body["error"] == "timeout", body
    assert f"{LIMIT_S:g} s" in body["message"]
