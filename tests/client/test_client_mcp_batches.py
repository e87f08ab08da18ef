"""``syncd mcp`` over raw stdio: JSON-RPC batches are served when the
negotiated protocol version has them (2025-03-26), as JSON-RPC 2.0 says: one
array of responses, none for notifications, an invalid element answered in
place, an empty batch ``-32600``; a version without them (2025-06-18 on)
still refuses each with ``-32600``. Against a real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.client import mcp_support as stdio
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

pytest.importorskip("mcp")

BATCH_VERSION = "2025-03-26"
"""The one MCP version with batches (2025-06-18 took them out)."""

QUIET_S = 0.5
"""How long a batch that deserves no answer is watched for one."""


class Session:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, message: Any) -> None:
        await stdio.send_bytes(self.proc, json.dumps(message).encode() + b"\n")

    async def answer(self, timeout_s: float = stdio.ANSWER_TIMEOUT_S) -> Any:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        assert line, "the server closed its output"
        return json.loads(line)


async def _session(server: RunningServer, version: str) -> AsyncIterator[Session]:
    args = ["--base-url", server.url, "--token", make_token(21), "--namespace", NS]
    async with stdio.mcp_process([*args, "--crdt", "tags:orset"]) as proc:
        session = Session(proc)
        init = {**stdio.INIT, "params": {**stdio.INIT["params"], "protocolVersion": version}}
        await session.send(init)
        answer = await session.answer(stdio.START_TIMEOUT_S)  # the subprocess starting
        assert answer["result"]["protocolVersion"] == version
        await session.send(stdio.INITIALIZED)
        yield session


@pytest.fixture
async def batching(server: RunningServer) -> AsyncIterator[Session]:
    async for session in _session(server, BATCH_VERSION):
        yield session


def _request(request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _add(request_id: Any, element: str) -> dict[str, Any]:
    params = {"name": "service_add_tags", "arguments": {"element": element}}
    return _request(request_id, "tools/call", params)


NOTIFICATION = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}


async def test_a_batch_is_answered_with_an_array(batching: Session) -> None:
    await batching.send(
        [_request(1, "tools/list"), NOTIFICATION, _add("two", "a"), _add(3, "b"), {"x": 1}]
    )
    answers = await batching.answer()
    assert isinstance(answers, list), answers
    by_id = {json.dumps(answer.get("id")): answer for answer in answers}
    assert sorted(by_id) == sorted(["1", '"two"', "3", "null"]), answers
    assert by_id["1"]["result"]["tools"][0]["name"] == "service_read_tags"
    for key in ('"two"', "3"):
        assert by_id[key]["result"]["isError"] is False, by_id[key]
    assert by_id["null"]["error"]["code"] == -32600
    # Both adds were applied, once each.
    await batching.send(_request(4, "tools/call", {"name": "service_read_tags", "arguments": {}}))
    read = await batching.answer()
    assert read["id"] == 4
    assert sorted(read["result"]["structuredContent"]["value"]) == ["a", "b"]


async def test_an_empty_batch_is_an_invalid_request(batching: Session) -> None:
    await batching.send([])
    answer = await batching.answer()
    assert isinstance(answer, dict) and answer["id"] is None, answer
    assert answer["error"]["code"] == -32600


async def test_a_batch_over_the_bound_is_an_invalid_request(batching: Session) -> None:
    from syncd.client.mcp_server import MAX_BATCH_MESSAGES

    await batching.send([_request(n, "ping") for n in range(MAX_BATCH_MESSAGES + 1)])
    answer = await batching.answer()
    assert isinstance(answer, dict) and answer["error"]["code"] == -32600, answer
    await batching.send([_request(n, "ping") for n in range(MAX_BATCH_MESSAGES)])
    answers = await batching.answer()
    assert sorted(answer["id"] for answer in answers) == list(range(MAX_BATCH_MESSAGES))


async def test_a_batch_of_notifications_gets_no_answer(batching: Session) -> None:
    await batching.send([NOTIFICATION, NOTIFICATION])
    with pytest.raises(asyncio.TimeoutError):
        await batching.answer(QUIET_S)
    await batching.send(_request("after", "tools/list"))
    assert (await batching.answer())["id"] == "after"


async def test_batch_ids_may_repeat_a_pending_request_id(batching: Session) -> None:
    """Ids are the client's: the same id in a batch and in a lone request, or
    twice in a batch, is answered for each, with that id."""
    await batching.send([_request(5, "tools/list"), _request(5, "ping")])
    answers = await batching.answer()
    assert [answer["id"] for answer in answers] == [5, 5], answers
    assert {"tools" in answer["result"] for answer in answers} == {True, False}


async def test_initialize_in_a_batch_is_refused(batching: Session) -> None:
    await batching.send([stdio.INIT, _request(6, "ping")])
    answers = await batching.answer()
    by_id = {answer["id"]: answer for answer in answers}
    assert by_id[0]["error"]["code"] == -32600 and by_id[6]["result"] == {}, answers


async def test_a_version_without_batches_refuses_them(server: RunningServer) -> None:
    async for session in _session(server, "2025-06-18"):
        await session.send([_request(1, "tools/list")])
        answer = await session.answer()
        assert isinstance(answer, dict) and answer["error"]["code"] == -32600, answer
        assert "batch" in answer["error"]["message"]


async def test_a_cancelled_request_leaves_the_rest_of_its_batch_answered(
    server: RunningServer,
) -> None:
    """A cancelled request gets no answer (MCP), so its batch must not wait
    for one: the others' answers come as the batch's array."""
    from tests.client.stalling_proxy import proxy_to

    async with proxy_to(server) as proxy:
        proxy.stall()  # the tool call's request never reaches the service
        url = f"http://127.0.0.1:{proxy.port}"
        args = ["--base-url", url, "--token", make_token(21), "--namespace", NS]
        async with stdio.mcp_process([*args, "--crdt", "tags:orset"]) as proc:
            session = Session(proc)
            init = {
                **stdio.INIT,
                "params": {**stdio.INIT["params"], "protocolVersion": BATCH_VERSION},
            }
            await session.send(init)
            await session.answer(stdio.START_TIMEOUT_S)  # the subprocess starting
            await session.send(stdio.INITIALIZED)
            await session.send([_request(1, "ping"), _add(2, "slow")])
            with pytest.raises(asyncio.TimeoutError):
                await session.answer(QUIET_S)  # the batch waits for the call
            for other in (2.0, "2", True):  # other ids than 2, equal to it in Python
                cancel = {"requestId": other}
                await session.send(
                    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
                )
            with pytest.raises(asyncio.TimeoutError):
                await session.answer(QUIET_S)  # still waiting for request 2
            cancel = {"requestId": 2, "reason": "took too long"}
            await session.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            )
            answers = await session.answer()
            assert answers == [{"jsonrpc": "2.0", "id": 1, "result": {}}], answers
            proxy.resume()
            await session.send(_request(3, "ping"))
            assert (await session.answer())["id"] == 3
