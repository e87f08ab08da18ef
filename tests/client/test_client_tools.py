"""Agent tools: names, schemas in both shapes, and execution against the real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from syncd.client import (
    AgentTools,
    AsyncClient,
    Client,
    ServiceError,
    SyncAgentTools,
    anthropic_tools,
    build_tools,
    openai_tools,
    parse_tool_name,
    tool_name,
)
from syncd.client.tools import MAX_TOOL_NAME_LEN
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [
    ("page-visits", "gcounter"),
    ("score", "pncounter"),
    ("title", "lwwregister"),
    ("cart-42", "orset"),
    ("room-1", "presence"),
    ("doc", "rga"),
    ("outline", "tree"),
]


def test_tool_names() -> None:
    names = [tool.name for tool in build_tools(CRDTS)]
    assert names == [
        "service_read_page_visits",
        "service_increment_page_visits",
        "service_history_page_visits",
        "service_read_score",
        "service_increment_score",
        "service_history_score",
        "service_restore_score",
        "service_revert_score",
        "service_read_title",
        "service_set_title",
        "service_history_title",
        "service_restore_title",
        "service_revert_title",
        "service_read_cart_42",
        "service_add_cart_42",
        "service_history_cart_42",
        "service_restore_cart_42",
        "service_revert_cart_42",
        "service_read_room_1",
        "service_history_room_1",
        "service_read_doc",
        "service_history_doc",
        "service_restore_doc",
        "service_revert_doc",
        "service_read_outline",
        "service_history_outline",
        "service_restore_outline",
        "service_revert_outline",
    ]
    assert tool_name("read", "gc:a/b-c") == "service_read_gc_a_b_c"
    assert parse_tool_name("service_increment_page_visits") == ("increment", "page-visits")
    for bad in ("read_x", "service_x", "service_fly_x", "service_read_", "other_read_x"):
        assert parse_tool_name(bad) is None


@pytest.mark.parametrize("bad", ["", "a/b", "a b", "é", "x" * 300])
def test_invalid_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        build_tools([(bad, "gcounter")])


def test_prefixed_and_other_valid_ids_get_tools() -> None:
    built = build_tools([("gc:visits", "gcounter"), ("a_b.c", "orset")])
    assert [t.name for t in built] == [
        "service_read_gc_visits",
        "service_increment_gc_visits",
        "service_history_gc_visits",
        "service_read_a_b_c",
        "service_add_a_b_c",
        "service_history_a_b_c",
        "service_restore_a_b_c",
        "service_revert_a_b_c",
    ]
    with pytest.raises(ValueError, match="share the tool name"):
        build_tools([("gc:a-b", "gcounter"), ("gc:a_b", "gcounter")])


def test_unknown_type_repeated_id_and_long_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        build_tools([("a", "hyperloglog")])
    with pytest.raises(ValueError, match="twice"):
        build_tools([("a", "gcounter"), ("a", "orset")])
    longest = MAX_TOOL_NAME_LEN - len("service_increment_")
    assert build_tools([("x" * longest, "gcounter")])[1].name.__len__() == MAX_TOOL_NAME_LEN
    with pytest.raises(ValueError, match="longer than"):
        build_tools([("x" * (longest + 1), "gcounter")])


def test_schemas_in_both_shapes() -> None:
    tools = build_tools(CRDTS)
    openai = openai_tools(tools)
    anthropic = anthropic_tools(tools)
    assert len(openai) == len(anthropic) == len(tools)
    for o, a, tool in zip(openai, anthropic, tools, strict=True):
        assert set(o) == {"type", "function"} and o["type"] == "function"
        assert set(o["function"]) == {"name", "description", "parameters"}
        assert set(a) == {"name", "description", "input_schema"}
        assert o["function"]["name"] == a["name"] == tool.name
        assert o["function"]["parameters"] == a["input_schema"]
        assert a["input_schema"]["type"] == "object"
        assert tool.crdt_id in a["description"]
        json.dumps(o), json.dumps(a)  # plain JSON
    by_name = {a["name"]: a["input_schema"] for a in anthropic}
    increment = by_name["service_increment_page_visits"]
    assert increment["properties"]["amount"]["type"] == "integer"
    assert increment["properties"]["amount"]["minimum"] == 1
    assert "required" not in increment
    setter = by_name["service_set_title"]
    assert set(setter["properties"]) == {"value", "client_id"} and setter["required"] == ["value"]
    assert {"string", "number", "object"} <= set(setter["properties"]["value"]["type"])
    assert setter["properties"]["client_id"]["type"] == "integer"
    adder = by_name["service_add_cart_42"]
    assert set(adder["properties"]) == {"element"} and adder["required"] == ["element"]
    assert set(by_name["service_read_doc"]["properties"]) == {"offset"}


@pytest.fixture
async def tools(server: RunningServer) -> Any:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        yield AgentTools(client, CRDTS)


async def test_execute_each_tool(tools: AgentTools) -> None:
    assert await tools.execute("service_increment_page_visits", {}) == {
        "ok": True,
        "seq": 1,
        "value": 1,
    }
    assert await tools.execute("service_increment_page_visits", {"amount": 4}) == {
        "ok": True,
        "seq": 2,
        "value": 5,
    }
    assert (await tools.execute("service_increment_score", '{"amount": 2}'))["value"] == 2
    assert (await tools.execute("service_set_title", {"value": {"text": "Hi"}}))["value"] == {
        "text": "Hi"
    }
    assert (await tools.execute("service_set_title", {"value": 3, "client_id": 3}))["value"] == 3
    assert (await tools.execute("service_add_cart_42", {"element": "apple"}))["value"] == ["apple"]
    assert (await tools.execute("service_add_cart_42", {"element": {"sku": 9}}))["value"] == [
        "apple",
        {"sku": 9},
    ]
    read = await tools.execute("service_read_page_visits", {})
    assert (
        read["ok"] is True
        and read["value"] == 5
        and read["seq"] == 2
        and read["type"] == "gcounter"
    )
    assert (await tools.execute("service_read_title", None))["value"] == 3
    assert (await tools.execute("service_read_cart_42"))["value"] == ["apple", {"sku": 9}]
    # The ids really are the hyphenated ones, created with the pair's type.
    view = await tools.client.read("cart-42")
    assert view is not None and view["type"] == "orset"
    json.dumps(read)


async def test_execute_errors_come_back_as_results(
    tools: AgentTools, server: RunningServer
) -> None:
    cases: list[tuple[str, Any, str]] = [
        ("service_fly_page_visits", {}, "unknown_tool"),
        ("service_read_nope", {}, "unknown_tool"),
        ("service_set_page_visits", {"value": 1}, "unknown_tool"),  # not a register
        ("service_increment_page_visits", {"amount": 0}, "invalid_input"),
        ("service_increment_page_visits", {"amount": "3"}, "invalid_input"),
        ("service_increment_page_visits", {"amount": True}, "invalid_input"),
        ("service_increment_page_visits", {"amount": 1, "extra": 1}, "invalid_input"),
        ("service_increment_page_visits", "{not json", "invalid_input"),
        ("service_increment_page_visits", [1], "invalid_input"),
        ("service_set_title", {}, "invalid_input"),
        ("service_add_cart_42", {"value": 1}, "invalid_input"),
        ("service_set_title", {"value": 1, "client_id": 99}, "forbidden"),
        ("service_read_doc", {}, "not_found"),
        (12, {}, "unknown_tool"),  # type: ignore[list-item]
    ]
    for name, arguments, code in cases:
        result = await tools.execute(name, arguments)
        assert result["ok"] is False and result["error"] == code, (name, arguments, result)
        assert isinstance(result["message"], str) and result["message"]
    assert (await tools.execute("service_increment_page_visits", {"amount": 2.0}))["value"] == 2
    async with AsyncClient(server.url, make_token(4, write=()), NS) as reader:
        result = await AgentTools(reader, CRDTS).execute("service_add_cart_42", {"element": 1})
        assert result["ok"] is False and result["error"] == "forbidden"


async def test_execute_unreachable_service() -> None:
    async with AsyncClient("http://127.0.0.1:9", make_token(), NS) as client:
        result = await AgentTools(client, CRDTS, attempts=1).execute("service_read_doc", {})
        assert result["ok"] is False and result["error"] == "unavailable"


async def test_sync_tools(server: RunningServer) -> None:
    def run() -> None:
        with Client(server.url, make_token(6), NS) as client:
            tools = SyncAgentTools(client, CRDTS)
            assert tools.anthropic() == anthropic_tools(build_tools(CRDTS))
            assert tools.openai() == openai_tools(build_tools(CRDTS))
            assert tools.execute("service_increment_score", {"amount": 3})["value"] == 3
            assert tools.execute("service_set_title", {"value": "x"})["value"] == "x"
            assert tools.execute("service_add_cart_42", {"element": 1})["value"] == [1]
            assert tools.execute("service_read_score", {})["value"] == 3
            assert tools.execute("service_nope", {})["error"] == "unknown_tool"

    await asyncio.to_thread(run)


async def test_history_and_restore_tools(tools: AgentTools) -> None:
    for amount in (5, 7, 9):
        await tools.execute("service_increment_score", {"amount": amount})
    changes = await tools.execute("service_history_score", {"limit": 2})
    assert changes["ok"] is True and changes["seq"] == 3 and changes["oldest"] == 0
    assert [c["seq"] for c in changes["changes"]] == [3, 2] and changes["next"] == 2
    assert all(c["client_id"] == 3 and c["op"]["op"] == "increment" for c in changes["changes"])
    older = await tools.execute("service_history_score", {"before": 2})
    assert [c["seq"] for c in older["changes"]] == [1] and older["next"] is None
    assert (await tools.execute("service_history_score", {"at": 1}))["value"] == 5
    restored = await tools.execute("service_restore_score", {"seq": 1})
    assert restored["ok"] is True and restored["value"] == 5 and restored["seq"] == 4
    # Errors come back as results: bad input, a version in the future, a grow-only counter.
    bad = await tools.execute("service_history_score", {"limit": 500})
    assert bad["error"] == "invalid_input"
    assert (await tools.execute("service_restore_score", {}))["error"] == "invalid_input"
    assert (await tools.execute("service_history_score", {"at": 99}))["error"] == "bad_request"
    assert "service_restore_page_visits" not in [t.name for t in tools.tools]


async def test_history_tools_are_read_only_and_restore_needs_write(
    server: RunningServer,
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as writer:
        await writer.pncounter_increment("score", 4)
        await writer.pncounter_increment("score", 4)
    reader = make_token(4, write=())
    async with AsyncClient(server.url, reader, NS) as client:
        tools = AgentTools(client, CRDTS)
        assert (await tools.execute("service_history_score", {"at": 1}))["value"] == 4
        refused = await tools.execute("service_restore_score", {"seq": 1})
        assert refused["ok"] is False and refused["error"] == "forbidden"
        assert (await client.fetch("score"))["value"] == 8


async def test_client_history_at_and_restore_sync_and_async(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.lwwregister_set("title", "one")
        await client.lwwregister_set("title", "two")
        page = await client.history("title")
        assert [o["seq"] for o in page["ops"]] == [2, 1]
        assert (await client.at("title", 1))["value"] == "one"
        assert "state" in await client.at("title", 1, crdt_format=True)
        answer = await client.restore("title", 1, op_id="undo")
        assert answer["restored"] == 1 and (await client.fetch("title"))["value"] == "one"
        assert (await client.restore("title", 1, op_id="undo"))["duplicate"] is True
        with pytest.raises(ServiceError) as refused:
            await client.at("title", 50)
        assert refused.value.status == 400

    def run() -> None:
        with Client(server.url, make_token(6), NS) as client:
            assert client.history("title", limit=1)["ops"][0]["seq"] == 3
            assert client.at("title", 2)["value"] == "two"
            assert client.restore("title", 2)["restored"] == 2
            assert client.fetch("title")["value"] == "two"

    await asyncio.to_thread(run)


async def test_an_agent_with_an_origin_is_reviewed_and_reverted_by_tools(
    server: RunningServer,
) -> None:
    """The agent's tools stamp its origin; a supervisor's tools list that
    task's changes and take them back, keeping another writer's."""
    async with (
        AsyncClient(server.url, make_token(3), NS) as human,
        AsyncClient(server.url, make_token(9), NS) as agent_client,
    ):
        agent = AgentTools(agent_client, CRDTS, origin="agent:tags-1")
        supervisor = AgentTools(human, CRDTS)
        await human.orset_add("cart-42", "milk")
        assert (await agent.execute("service_add_cart_42", {"element": "caviar"}))["ok"]
        await human.orset_add("cart-42", "bread")
        assert (await agent.execute("service_set_title", {"value": "AI title"}))["ok"]
        changes = await supervisor.execute("service_history_cart_42", {"origin": "agent:tags-1"})
        assert [(c["client_id"], c["origin"]) for c in changes["changes"]] == [(9, "agent:tags-1")]
        by_client = await supervisor.execute("service_history_cart_42", {"client_id": 3})
        assert len(by_client["changes"]) == 2
        reverted = await supervisor.execute("service_revert_cart_42", {"origin": "agent:tags-1"})
        assert reverted["ok"] is True and reverted["reverted"] == 1 and reverted["applied"] == 1
        assert reverted["value"] == ["bread", "milk"]
        again = await supervisor.execute("service_revert_cart_42", {"origin": "agent:tags-1"})
        assert again["reverted"] == 0 and again["value"] == ["bread", "milk"]
        # Errors come back as results.
        assert (await supervisor.execute("service_revert_cart_42", {}))["error"] == "invalid_input"
        bad = await supervisor.execute("service_history_cart_42", {"origin": ""})
        assert bad["error"] == "invalid_input"
        assert "service_revert_page_visits" not in [t.name for t in supervisor.tools]
        with pytest.raises(ValueError):
            AgentTools(human, CRDTS, origin="x" * 129)


async def test_client_origin_filtered_history_and_revert_sync_and_async(
    server: RunningServer,
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply("doc", {"op": "insert", "index": 0, "text": "hi", "type": "rga"})
        await client.apply_retrying(
            "doc", [{"op": "insert", "index": 2, "text": "!"}], origin="bot"
        )
        page = await client.history("doc", origin="bot")
        assert [(o["seq"], o["origin"]) for o in page["ops"]] == [(2, "bot")]
        assert (await client.history("doc", client_id=4))["ops"] == []
        answer = await client.revert("doc", origin="bot", op_id="r1")
        assert answer["matched"] == 1 and (await client.fetch("doc"))["text"] == "hi"
        assert (await client.revert("doc", origin="bot", op_id="r1"))["duplicate"] is True
        with pytest.raises(ValueError):
            await client.revert("doc")
        with pytest.raises(ServiceError) as refused:
            await client.revert("page-visits", client_id=3)
        assert refused.value.status == 404

    def run() -> None:
        with Client(server.url, make_token(6), NS) as client:
            client.apply("doc", {"op": "insert", "index": 0, "text": ">"}, origin="bot2")
            assert client.history("doc", origin="bot2", limit=1)["ops"][0]["origin"] == "bot2"
            assert client.revert("doc", client_id=6, origin="bot2")["applied"] == 1
            assert client.fetch("doc")["text"] == "hi"

    await asyncio.to_thread(run)
