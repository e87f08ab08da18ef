"""Agent tools page a text under a 256-character Yjs root name at the
smallest result limit: every page moves on and fits, and the pages make up
the whole text (the root named in both the page's ``root`` field and its
message left no room: an empty page whose ``next_offset`` was its own
offset, which an agent following it asked for again for ever), against the
real server."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pycrdt import Doc, Text

from syncd.client import AgentTools, AsyncClient
from syncd.client.bounded import MIN_MAX_RESULT_CHARS, size
from syncd.client.ydoc_read import MAX_ROOT_NAME
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDT_ID = "yd:" + "n" * 40
"""As long as an id can be whose tool names stay within 64 characters."""
ROOT = "r" * MAX_ROOT_NAME
TEXT = "héllo wörld, " * 60


async def _pages(tools: AgentTools, name: str, arguments: dict[str, Any]) -> str:
    text, offset, pages = "", 0, 0
    while offset is not None:
        page = await tools.execute(name, {**arguments, "offset": offset})
        assert page["ok"] is True and page["root"] == ROOT, page
        assert size(page) <= MIN_MAX_RESULT_CHARS
        assert ROOT not in page["message"]  # named once, in the root field
        assert page["value"], page  # something on every page
        text += page["value"]
        next_offset = page.get("next_offset")
        assert next_offset is None or next_offset > offset
        offset = next_offset
        pages += 1
        assert pages < len(TEXT)
    return text


@pytest.mark.parametrize("tool", ["read", "history"])
async def test_a_text_under_a_long_root_name_pages_to_its_end(
    server: RunningServer, tool: str
) -> None:
    doc: Doc[Any] = Doc()
    doc[ROOT] = Text(TEXT)
    update = base64.b64encode(doc.get_update()).decode()
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply(CRDT_ID, {"op": "update", "type": "ydoc", "update": update})
        tools = AgentTools(client, [(CRDT_ID, "ydoc")], max_result_chars=MIN_MAX_RESULT_CHARS)
        name = f"service_{tool}_yd_{'n' * 40}"
        arguments: dict[str, Any] = {"root": ROOT, "as": "text"}
        if tool == "history":
            arguments["at"] = 1
        assert await _pages(tools, name, arguments) == TEXT


def test_a_page_with_no_room_still_moves_on() -> None:
    from syncd.client.bounded import bound_value

    result = {"ok": True, "id": "x" * 600, "type": "lwwregister", "value": "abc" * 500}
    page = bound_value(
        result, "lwwregister", offset=7, max_chars=MIN_MAX_RESULT_CHARS, read_more="r" * 400
    )
    assert page["value"] == "b" and page["offset"] == 7 and page["next_offset"] == 8
