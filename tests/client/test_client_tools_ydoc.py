"""Agent tools read a Yjs document as text, JSON or XML, not as a base64
update (docs/clients.md#yjs-documents), against the real server."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pycrdt import Doc, Map, Text, XmlElement, XmlFragment, XmlText

from syncd.client import AgentTools, AsyncClient, build_tools
from syncd.client.bounded import MIN_MAX_RESULT_CHARS, size
from syncd.client.ydoc_read import YdocReadError, root_read
from syncd.crdt import ydoc
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

CRDTS = [("yd:notes", "ydoc"), ("draft", "ydoc")]


def _document(text: str = "Hello, agent") -> str:
    doc: Doc[Any] = Doc()
    doc["body"] = Text(text)
    doc["meta"] = Map({"title": "Notes", "tags": ["a", "b"]})
    fragment = XmlFragment()
    doc["default"] = fragment
    fragment.children.append(XmlElement("paragraph", {}, [XmlText("Rich")]))
    return base64.b64encode(doc.get_update()).decode()


@pytest.fixture
async def tools(server: RunningServer) -> Any:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        for crdt_id, _ in CRDTS:
            await client.apply(crdt_id, {"op": "update", "type": "ydoc", "update": _document()})
        yield AgentTools(client, CRDTS)


@pytest.mark.parametrize("crdt_id", [crdt_id for crdt_id, _ in CRDTS])
async def test_a_ydoc_reads_as_its_roots_then_as_text_json_or_xml(
    tools: AgentTools, crdt_id: str
) -> None:
    name = build_tools([(crdt_id, "ydoc")])[0].name
    listing = await tools.execute(name, {})
    assert listing["ok"] is True and listing["roots"] == ["body", "default", "meta"]
    assert "value" not in listing and "root=" in listing["message"]
    assert listing["id"] == crdt_id and listing["seq"] == 1
    text = await tools.execute(name, {"root": "body", "as": "text"})
    assert text["value"] == "Hello, agent" and text["root"] == "body" and text["as"] == "text"
    assert (await tools.execute(name, {"root": "body"}))["value"] == "Hello, agent"
    meta = await tools.execute(name, {"root": "meta", "as": "map"})
    assert meta["value"] == {"title": "Notes", "tags": ["a", "b"]}
    xml = await tools.execute(name, {"root": "default", "as": "xml"})
    assert xml["value"] == "<paragraph>Rich</paragraph>"
    # Bad input comes back as a result naming what is wrong, never a crash.
    missing = await tools.execute(name, {"root": "nope"})
    assert missing["error"] == "invalid_input" and "'body'" in missing["message"]
    # XML read as an array: its elements, each as its XML text.
    as_array = await tools.execute(name, {"root": "default", "as": "array"})
    assert as_array["value"] == ["<paragraph>Rich</paragraph>"], as_array
    for bad in ({"as": "xml"}, {"root": ""}, {"root": "body", "as": "html"}, {"root": 5}):
        result = await tools.execute(name, bad)
        assert result["error"] == "invalid_input", (bad, result)


async def test_a_ydoc_at_a_version_and_after_a_revert_is_readable(tools: AgentTools) -> None:
    client = tools.client
    await client.apply("yd:notes", {"op": "update", "type": "ydoc", "update": _document("x")})
    at = await tools.execute("service_history_yd_notes", {"at": 1, "root": "body"})
    assert at["ok"] is True and at["value"] == "Hello, agent" and at["seq"] == 1
    roots = await tools.execute("service_history_yd_notes", {"at": 1})
    assert roots["roots"] == ["body", "default", "meta"]
    listing = await tools.execute("service_history_yd_notes", {"root": "body"})
    assert listing["error"] == "invalid_input"
    reverted = await tools.execute("service_revert_yd_notes", {"client_id": 99})
    assert reverted["ok"] is True and reverted["reverted"] == 0 and "roots" in reverted


async def test_a_long_ydoc_text_is_paged(server: RunningServer) -> None:
    long_text = "word " * 2000
    async with AsyncClient(server.url, make_token(3), NS) as client:
        update = _document(long_text)
        await client.apply("yd:notes", {"op": "update", "type": "ydoc", "update": update})
        tools = AgentTools(client, CRDTS, max_result_chars=MIN_MAX_RESULT_CHARS)
        listing = await tools.execute("service_read_yd_notes", {})
        assert size(listing) <= MIN_MAX_RESULT_CHARS
        pages, offset = [], 0
        while offset is not None:
            page = await tools.execute(
                "service_read_yd_notes", {"root": "body", "as": "text", "offset": offset}
            )
            assert page["truncated"] is True and size(page) <= MIN_MAX_RESULT_CHARS
            assert "root='body'" in page["message"] or page["next_offset"] is None
            pages.append(page["value"])
            offset = page["next_offset"]
        assert "".join(pages) == long_text


def test_the_ydoc_tools_take_root_and_as() -> None:
    read, history, revert = build_tools([("yd:notes", "ydoc")])
    assert set(read.input_schema["properties"]) == {"offset", "root", "as"}
    assert read.input_schema["properties"]["as"]["enum"] == ["text", "map", "array", "xml"]
    assert "Yjs" in read.description and "root" in read.description
    assert {"at", "offset", "root", "as"} <= set(history.input_schema["properties"])
    assert revert.name == "service_revert_yd_notes"


def test_a_ydoc_root_too_deep_to_show_says_so_not_to_read_it_as_xml() -> None:
    """A root nested past what a view holds (ydoc.MAX_XML_DEPTH levels of XML,
    MAX_VIEW_DEPTH of maps and arrays) cannot be shown: the tool said to try
    as=xml, also for the XML read as xml, which cannot help."""
    doc: Doc[Any] = Doc()
    with doc.transaction():
        node: Any = doc.get("default", type=XmlFragment)
        for _ in range(ydoc.MAX_XML_DEPTH):
            node = node.children.append(XmlElement("p"))
        held: Any = doc.get("meta", type=Map)
        for _ in range(ydoc.MAX_VIEW_DEPTH):
            held["k"] = Map()
            held = held["k"]
    view = {"value": base64.b64encode(doc.get_update()).decode()}
    for root, kind in (("default", "xml"), ("meta", "map")):
        with pytest.raises(YdocReadError) as raised:
            root_read(view, root, kind)
        assert "as=xml" not in str(raised.value) and "deeper than" in str(raised.value)
