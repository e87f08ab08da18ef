"""Agent tools given a Python dict whose field names are not all strings
(what a caller's own code may build; a JSON object's never are): an
``invalid_input`` result, not a TypeError out of ``execute`` from listing the
unknown fields, against the real server."""

from __future__ import annotations

import asyncio
from typing import Any

from syncd.client import AgentTools, AsyncClient, Client, SyncAgentTools
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [("hits", "gcounter"), ("title", "lwwregister")]

BAD: list[tuple[str, Any]] = [
    ("service_set_title", {None: 1}),
    ("service_set_title", {"value": 1, 2: "x", "z": 3}),
    ("service_increment_hits", {1: 2, "a": 3}),
    ("service_read_hits", {(1, 2): 0}),
    ("service_history_hits", {b"limit": 3}),
]


def _check(name: str, result: Any) -> None:
    assert result == {
        "ok": False,
        "error": "invalid_input",
        "message": "the tool input's field names must be strings",
    }, name


async def test_field_names_that_are_not_strings_are_invalid_input(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS)
        for name, arguments in BAD:
            _check(name, await tools.execute(name, arguments))
        assert await client.read("title") is None and await client.read("hits") is None


async def test_field_names_that_are_not_strings_sync_tools(server: RunningServer) -> None:
    def run() -> None:
        with Client(server.url, make_token(4), NS) as client:
            tools = SyncAgentTools(client, CRDTS)
            for name, arguments in BAD:
                _check(name, tools.execute(name, arguments))

    await asyncio.to_thread(run)
