"""Agent tools page a Yjs document's list of roots as they page a value:
a document with more roots than one result holds lists them from ``offset``
with ``next_offset`` (the list was cut to the roots that fit, with
``truncated: true`` and no way to read the rest), and a large array or text
root reads whole page by page. Against the real server."""

from __future__ import annotations

import base64
from typing import Any

from pycrdt import Array, Doc, Map, Text, XmlElement, XmlFragment, XmlText

from syncd.client import AgentTools, AsyncClient
from syncd.client.bounded import MIN_MAX_RESULT_CHARS, size
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

ROOTS = [f"section-{n:04d}" for n in range(300)]
"""Far more root names than the smallest result limit holds."""

ELEMENTS = [f"item-{n}" for n in range(500)]
TEXT = "paragraph of words. " * 400


def _update() -> str:
    doc: Doc[Any] = Doc()
    for name in ROOTS:
        doc[name] = Text("x")
    doc["list"] = Array(ELEMENTS)
    doc["body"] = Text(TEXT)
    return base64.b64encode(doc.get_update()).decode()


async def _read_all(tools: AgentTools, name: str, arguments: dict[str, Any], field: str) -> Any:
    whole: Any = None
    offset: int | None = 0
    for _ in range(10_000):
        if offset is None:
            return whole
        page = await tools.execute(name, {**arguments, "offset": offset})
        assert page["ok"] is True, page
        assert size(page) <= MIN_MAX_RESULT_CHARS, page
        assert page.get("truncated") is True, page
        assert page["offset"] == offset, page
        whole = page[field] if whole is None else whole + page[field]
        next_offset = page["next_offset"]
        assert next_offset is None or next_offset > offset, page
        if next_offset is not None:
            assert f"offset={next_offset}" in page["message"], page
        offset = next_offset
    raise AssertionError("paging did not end")


async def test_roots_text_and_array_page_to_their_end(server: RunningServer) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply("yd:big", {"op": "update", "type": "ydoc", "update": _update()})
        tools = AgentTools(client, [("yd:big", "ydoc")], max_result_chars=MIN_MAX_RESULT_CHARS)
        read = "service_read_yd_big"
        roots = await _read_all(tools, read, {}, "roots")
        assert roots == sorted([*ROOTS, "list", "body"])
        history = await _read_all(tools, "service_history_yd_big", {"at": 1}, "roots")
        assert history == roots
        assert await _read_all(tools, read, {"root": "list", "as": "array"}, "value") == ELEMENTS
        assert await _read_all(tools, read, {"root": "body", "as": "text"}, "value") == TEXT
        past = await tools.execute(read, {"offset": len(roots) + 5})
        assert past["ok"] is True and past["roots"] == [] and past["next_offset"] is None


async def test_a_few_roots_still_come_whole(server: RunningServer) -> None:
    doc: Doc[Any] = Doc()
    doc["a"], doc["b"] = Text("1"), Text("2")
    update = base64.b64encode(doc.get_update()).decode()
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply("yd:small", {"op": "update", "type": "ydoc", "update": update})
        tools = AgentTools(client, [("yd:small", "ydoc")], max_result_chars=MIN_MAX_RESULT_CHARS)
        listing = await tools.execute("service_read_yd_small", {})
        assert listing["roots"] == ["a", "b"] and "truncated" not in listing
        second = await tools.execute("service_read_yd_small", {"offset": 1})
        assert second["roots"] == ["b"] and second["offset"] == 1
        assert second["next_offset"] is None and second["total"] == 2


def test_the_read_tool_says_the_roots_page() -> None:
    from syncd.client import build_tools

    read, history = build_tools([("yd:big", "ydoc")])[:2]
    assert "roots (many of them in pages, read on with offset" in read.description
    assert "without 'root' it lists the roots (many of them in pages" in history.description


async def test_a_root_read_the_wrong_way_says_how_to_read_it(server: RunningServer) -> None:
    """A Yjs update does not say which kind a root is, and a map root read as
    text (the default) is empty: the result says which kind shows content,
    instead of letting the model take the root for empty."""
    doc: Doc[Any] = Doc()
    doc["meta"] = Map({"title": "Notes"})
    doc["list"] = Array(["a"])
    fragment = XmlFragment()
    doc["default"] = fragment
    fragment.children.append(XmlElement("paragraph", {}, [XmlText("Rich")]))
    blank = Text("gone")
    doc["blank"] = blank
    del blank[0:4]  # a text root with nothing left in it
    update = base64.b64encode(doc.get_update()).decode()
    async with AsyncClient(server.url, make_token(3), NS) as client:
        await client.apply("yd:kinds", {"op": "update", "type": "ydoc", "update": update})
        tools = AgentTools(client, [("yd:kinds", "ydoc")])
        read = "service_read_yd_kinds"
        meta = await tools.execute(read, {"root": "meta"})
        assert meta["ok"] is True and meta["value"] == "", meta
        assert "as='map'" in meta["message"], meta
        listed = await tools.execute(read, {"root": "list", "as": "map"})
        assert listed["value"] == {} and "as='array'" in listed["message"], listed
        xml = await tools.execute(read, {"root": "default"})
        assert "as='xml'" in xml["message"], xml  # an XML fragment: xml before array
        history = await tools.execute("service_history_yd_kinds", {"at": 1, "root": "meta"})
        assert "as='map'" in history["message"], history
        right = await tools.execute(read, {"root": "meta", "as": "map"})
        assert right["value"] == {"title": "Notes"} and "message" not in right, right
        blank = await tools.execute(read, {"root": "blank"})
        assert blank["value"] == "" and "message" not in blank, blank
