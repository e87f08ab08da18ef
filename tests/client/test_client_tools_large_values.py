"""Agent tools against the real server: a value too large for a model's
context comes back as a page that says so and how to read on, and paging
with ``offset`` reads the whole value (docs/clients.md#large-values)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from syncd.client import AgentTools, AsyncClient, Client, SyncAgentTools
from syncd.client.bounded import DEFAULT_MAX_RESULT_CHARS, MIN_MAX_RESULT_CHARS, size
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [
    ("big-set", "orset"),
    ("essay", "rga"),
    ("note", "lwwregister"),
    ("outline", "tree"),
    ("hits", "gcounter"),
]
LIMIT = 2_000


async def _read_all(tools: AgentTools, name: str, field: str, **extra: Any) -> list[Any]:
    """Every page of a read, following next_offset; each within the limit."""
    pages: list[Any] = []
    offset: int | None = 0
    while offset is not None:
        result = await tools.execute(name, {**extra, "offset": offset})
        assert result["ok"] is True, result
        assert size(result) <= tools.max_result_chars, size(result)
        pages.append(result[field])
        offset = result.get("next_offset")
        assert len(pages) < 1000
    return pages


@pytest.fixture
async def client(server: RunningServer) -> Any:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        yield client


async def test_a_large_set_is_paged_and_paging_reads_it_all(client: AsyncClient) -> None:
    elements = [f"element-{n:05d}" for n in range(900)]
    await client.apply("big-set", [{"op": "add", "type": "orset", "element": e} for e in elements])
    tools = AgentTools(client, CRDTS, max_result_chars=LIMIT)
    first = await tools.execute("service_read_big_set", {})
    assert first["ok"] is True and first["truncated"] is True
    assert size(first) <= LIMIT
    assert first["offset"] == 0 and first["total"] == 900 and first["unit"] == "elements"
    assert first["next_offset"] == len(first["value"]) > 10
    assert f"offset={first['next_offset']}" in first["message"]
    assert "service_read_big_set" in first["message"]
    assert first["id"] == "big-set" and first["seq"] == 900
    pages = await _read_all(tools, "service_read_big_set", "value")
    assert [e for page in pages for e in page] == elements
    # An op's result is bounded the same way (an add answers the whole set).
    added = await tools.execute("service_add_big_set", {"element": "one-more"})
    assert added["ok"] is True and added["truncated"] is True and size(added) <= LIMIT
    # Past the end: an empty page that says so, not an error.
    past = await tools.execute("service_read_big_set", {"offset": 5000})
    assert past["value"] == [] and past["next_offset"] is None and "past the end" in past["message"]
    bad = await tools.execute("service_read_big_set", {"offset": -1})
    assert bad["error"] == "invalid_input"


async def test_the_default_limit_bounds_a_large_text(client: AsyncClient) -> None:
    text = "".join(f"line {n}: the quick brown fox\n" for n in range(3000))
    await client.apply("essay", {"op": "insert", "type": "rga", "index": 0, "text": text})
    tools = AgentTools(client, CRDTS)
    first = await tools.execute("service_read_essay")
    assert size(first) <= DEFAULT_MAX_RESULT_CHARS < len(text)
    assert first["truncated"] is True and first["unit"] == "characters"
    # A text is given as text; the same characters one by one are left out.
    assert "value" not in first and text.startswith(first["text"])
    assert "".join(await _read_all(tools, "service_read_essay", "text")) == text


async def test_a_small_value_is_whole_and_unchanged(client: AsyncClient) -> None:
    await client.apply("essay", {"op": "insert", "type": "rga", "index": 0, "text": "hi"})
    tools = AgentTools(client, CRDTS, max_result_chars=LIMIT)
    result = await tools.execute("service_read_essay", {})
    assert result == {"ok": True, **(await client.fetch("essay"))}
    assert "truncated" not in result


async def test_a_tree_is_paged_by_its_json_text(client: AsyncClient) -> None:
    await client.apply(
        "outline",
        [
            {"op": "add", "type": "tree", "id": f"n{n}", "parent": "root", "data": {"t": "x" * 30}}
            for n in range(120)
        ],
    )
    tools = AgentTools(client, CRDTS, max_result_chars=LIMIT)
    first = await tools.execute("service_read_outline", {})
    assert first["truncated"] is True and "value" not in first and size(first) <= LIMIT
    pages = await _read_all(tools, "service_read_outline", "value_json")
    assert json.loads("".join(pages)) == (await client.fetch("outline"))["value"]


async def test_an_element_too_large_for_any_page_is_previewed_and_skipped(
    client: AsyncClient,
) -> None:
    await client.apply(
        "big-set",
        [
            {"op": "add", "type": "orset", "element": "a"},
            {"op": "add", "type": "orset", "element": "b" * 5000},
            {"op": "add", "type": "orset", "element": "c"},
        ],
    )
    tools = AgentTools(client, CRDTS, max_result_chars=MIN_MAX_RESULT_CHARS)
    pages = await _read_all(tools, "service_read_big_set", "value")
    assert pages[0] == ["a"]
    skipped = await tools.execute("service_read_big_set", {"offset": 1})
    assert skipped["value"] == [] and skipped["next_offset"] == 2
    assert skipped["too_large"]["offset"] == 1 and skipped["too_large"]["json_chars"] == 5002
    assert skipped["too_large"]["preview"].startswith('"bbb')
    assert [e for page in pages for e in page] == ["a", "c"]


async def test_a_large_register_its_set_and_its_history(client: AsyncClient) -> None:
    tools = AgentTools(client, CRDTS, max_result_chars=LIMIT)
    big = "z" * 3000
    answer = await tools.execute("service_set_note", {"value": big})
    assert answer["ok"] is True and answer["truncated"] is True and size(answer) <= LIMIT
    assert answer["omitted"] == [] and answer["seq"] == 1
    assert "".join(await _read_all(tools, "service_read_note", "value")) == big
    for n in range(3):
        await tools.execute("service_set_note", {"value": f"{n}" * 700})
    page = await tools.execute("service_history_note", {})
    assert page["ok"] is True and page["truncated"] is True and size(page) <= LIMIT
    newest = [c["seq"] for c in page["changes"]]
    assert newest[0] == 4 and page["next"] == newest[-1] < 4
    assert f"before={page['next']}" in page["message"]
    # The oldest change alone is too large: its op is previewed.
    oldest = await tools.execute("service_history_note", {"before": 2})
    assert [c["seq"] for c in oldest["changes"]] == [1] and size(oldest) <= LIMIT
    assert "op" not in oldest["changes"][0] and oldest["changes"][0]["op_json_chars"] > 3000
    # A value read at a version pages with offset too.
    at = await tools.execute("service_history_note", {"at": 1})
    assert at["truncated"] is True and "at=1" in at["message"]
    rest = await tools.execute("service_history_note", {"at": 1, "offset": at["next_offset"]})
    assert rest["offset"] == at["next_offset"] and rest["value"] == "z" * len(rest["value"])
    refused = await tools.execute("service_history_note", {"offset": 3})
    assert refused["error"] == "invalid_input" and "'at'" in refused["message"]


async def test_large_extra_fields_are_left_out_and_named(server: RunningServer) -> None:
    for client_id in range(1, 120):
        async with AsyncClient(server.url, make_token(client_id), NS) as writer:
            await writer.apply("hits", {"op": "increment", "type": "gcounter", "amount": 1})
    async with AsyncClient(server.url, make_token(3), NS) as client:
        tools = AgentTools(client, CRDTS, max_result_chars=MIN_MAX_RESULT_CHARS)
        result = await tools.execute("service_read_hits", {})
        assert result["value"] == 119 and result["omitted"] == ["counts"]
        assert result["truncated"] is True and size(result) <= MIN_MAX_RESULT_CHARS


async def test_the_limit_is_checked_and_sync_tools_are_bounded(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        for bad in (MIN_MAX_RESULT_CHARS - 1, 0, "5000", 2.5):
            with pytest.raises(ValueError, match="max_result_chars"):
                AgentTools(client, CRDTS, max_result_chars=bad)  # type: ignore[arg-type]
        await client.apply(
            "big-set", [{"op": "add", "type": "orset", "element": n} for n in range(1000)]
        )

    def run() -> None:
        with Client(server.url, make_token(6), NS) as client:
            tools = SyncAgentTools(client, CRDTS, max_result_chars=LIMIT)
            first = tools.execute("service_read_big_set", {})
            assert first["truncated"] is True and size(first) <= LIMIT
            second = tools.execute("service_read_big_set", {"offset": first["next_offset"]})
            whole = client.fetch("big-set")["value"]
            assert second["value"][0] == whole[first["next_offset"]]

    await asyncio.to_thread(run)
