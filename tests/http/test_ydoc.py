"""Yjs documents over HTTP: updates as ops, reads, root views, the past, errors."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pycrdt import Array, Doc, Map, Text, XmlElement, XmlFragment

from syncd.crdt import ydoc, ydoc_nesting
from syncd.http.handlers import crdts
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


def _typing(words: list[str]) -> list[str]:
    """One base64 update per word typed into root ``content``; a title in ``meta``."""
    doc: Doc[Any] = Doc(client_id=99)
    text = doc.get("content", type=Text)
    updates: list[bytes] = []
    doc.observe(lambda event: updates.append(event.update))
    for word in words:
        text += word
    doc.get("meta", type=Map)["title"] = "notes"
    return [base64.b64encode(u).decode() for u in updates]


async def test_updates_apply_and_read_back_as_one_update_and_views(
    client: httpx.AsyncClient,
) -> None:
    h = await issue(client)
    updates = _typing(["hello", " ", "world"])
    for update in updates[:2]:
        r = await op(client, h, "yd:notes", {"op": "update", "update": update})
        assert r.status_code == 200, r.text
    r = await op(client, h, "yd:notes", [{"op": "update", "update": u} for u in updates[2:]])
    assert r.json()["seq"] == len(updates)
    read = (await client.get(f"{BASE}/yd:notes", headers=h)).json()
    assert read["type"] == "ydoc" and read["seq"] == len(updates)
    doc: Doc[Any] = Doc()
    doc.apply_update(base64.b64decode(read["value"]))
    assert str(doc.get("content", type=Text)) == "hello world"
    assert base64.b64decode(read["state_vector"]) == doc.get_state()
    text = (await client.get(f"{BASE}/yd:notes?root=content&as=text", headers=h)).json()
    assert text["value"] == "hello world" and text["root"] == "content"
    meta = (await client.get(f"{BASE}/yd:notes?root=meta&as=map", headers=h)).json()
    assert meta["value"] == {"title": "notes"}
    # The past: right after the second update.
    past = (await client.get(f"{BASE}/yd:notes?root=content&at=2", headers=h)).json()
    assert past["value"] == "hello " and past["seq"] == 2
    full = (await client.get(f"{BASE}/yd:notes?format=crdt", headers=h)).json()
    assert set(full["state"]) == {"update"}


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("?root=content&as=html", 400),
        ("?root=&as=text", 400),
        ("?root=" + "x" * 300, 400),
    ],
)
async def test_bad_root_views_are_400(client: httpx.AsyncClient, query: str, status: int) -> None:
    h = await issue(client)
    await op(client, h, "yd:notes", {"op": "update", "update": _typing(["a"])[0]})
    r = await client.get(f"{BASE}/yd:notes{query}", headers=h)
    assert r.status_code == status and r.json()["error"] == "bad_request"


async def test_root_views_are_for_yjs_documents_only(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    await op(client, h, "gc:n", {"op": "increment"})
    r = await client.get(f"{BASE}/gc:n?root=content", headers=h)
    assert r.status_code == 409 and r.json()["error"] == "type_mismatch"
    assert (await client.get(f"{BASE}/yd:none?root=content", headers=h)).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"op": "update", "update": "%%%"}, 400, "invalid_op"),
        # A character past ASCII: binascii raises ValueError, not binascii.Error
        # (a 500 that schemathesis found).
        ({"op": "update", "update": "AAé="}, 400, "invalid_op"),
        ({"op": "update", "update": base64.b64encode(b"\x01\x02\x03").decode()}, 400, "invalid_op"),
        ({"op": "update"}, 400, "invalid_op"),
        ({"op": "insert", "index": 0, "text": "x"}, 400, "invalid_op"),
    ],
)
async def test_bad_updates_get_clear_errors_and_change_nothing(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, code: str
) -> None:
    h = await issue(client)
    await op(client, h, "yd:notes", {"op": "update", "update": _typing(["kept"])[0]})
    r = await op(client, h, "yd:notes", body)
    assert r.status_code == status and r.json()["error"] == code
    text = (await client.get(f"{BASE}/yd:notes?root=content", headers=h)).json()
    assert text["value"] == "kept" and text["seq"] == 1


async def test_an_update_over_the_body_limit_is_413(make_server: Any) -> None:
    server: RunningServer = await make_server(max_body_bytes=4096)
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        big = _typing(["x" * 8000])[0]
        r = await op(client, h, "yd:big", {"op": "update", "update": big})
        assert r.status_code == 413


async def test_restore_of_a_yjs_document_is_409(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    for update in _typing(["a", "b"]):
        await op(client, h, "yd:notes", {"op": "update", "update": update})
    r = await client.post(f"{BASE}/yd:notes/restore", json={"seq": 1}, headers=h)
    assert r.status_code == 409 and r.json()["error"] == "not_restorable"


async def test_an_update_with_an_op_id_applies_once(client: httpx.AsyncClient) -> None:
    h = await issue(client)
    update = _typing(["once"])[0]
    body = {"op": "update", "update": update, "op_id": "edit-1"}
    first = (await op(client, h, "yd:notes", body)).json()
    again = (await op(client, h, "yd:notes", body)).json()
    assert first["seq"] == again["seq"] == 1 and again.get("duplicate") is True
    read = (await client.get(f"{BASE}/yd:notes", headers=h)).json()
    assert read["seq"] == 1


async def test_the_snapshot_holds_the_merged_document_not_the_updates(make_server: Any) -> None:
    """Typing and deleting the same text again and again: the updates add up,
    the snapshot's document stays the size of what is left."""
    server: RunningServer = await make_server(rate_limit=1_000_000)
    client = httpx.AsyncClient(base_url=server.url)
    h = await issue(client)
    doc: Doc[Any] = Doc(client_id=5)
    text = doc.get("content", type=Text)
    updates: list[bytes] = []
    doc.observe(lambda event: updates.append(event.update))
    for _ in range(50):
        text += "some words to type"
        del text[0 : len(str(text)) - 4]
    for update in updates:
        body = {"op": "update", "update": base64.b64encode(update).decode()}
        assert (await op(client, h, "yd:churn", body)).status_code == 200
    await server.app.store.compact_now()
    state = (await client.get(f"{BASE}/yd:churn?format=crdt", headers=h)).json()["state"]
    merged = base64.b64decode(state["update"])
    assert len(merged) * 5 < sum(len(u) for u in updates)
    fresh: Doc[Any] = Doc()
    fresh.apply_update(merged)
    assert str(fresh.get("content", type=Text)) == str(text)
    await client.aclose()


_JS_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "js"

_JS_WRITER = """
const Y = require('yjs');
const doc = new Y.Doc();
doc.clientID = 7;
const meta = doc.getMap('meta');
meta.set('count', 1);
meta.set('big', 2 ** 40);
meta.set('half', 1.5);
meta.set('neg', -3);
meta.set('huge', 1e16);
meta.set('nested', { n: 2, list: [3, 0.25] });
doc.getArray('list').push([1, 2.5, -0]);
process.stdout.write(Buffer.from(Y.encodeStateAsUpdate(doc)).toString('base64'));
"""


def _js_update() -> str:
    """The document as the JS Yjs client (the one clients/js tests with) writes it."""
    node = shutil.which("node")
    if node is None or not (_JS_CLIENT / "node_modules" / "yjs").is_dir():
        pytest.skip("node or clients/js/node_modules/yjs is not installed")
    done = subprocess.run(
        [node, "-e", _JS_WRITER],
        cwd=_JS_CLIENT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _py_update() -> str:
    doc: Doc[Any] = Doc(client_id=7)
    with doc.transaction():
        meta = doc.get("meta", type=Map)
        meta.update({"count": 1, "big": 2**40, "half": 1.5, "neg": -3, "huge": 10**16})
        meta["nested"] = {"n": 2, "list": [3, 0.25]}
        doc.get("list", type=Array).extend([1, 2.5, -0.0])
    return base64.b64encode(doc.get_update()).decode()


def _typed(text: str) -> Any:
    """The answer with each JSON number that has a fraction or an exponent
    marked: 1 and 1.0 compare equal in Python, not as the text a client reads."""
    return json.loads(text, parse_float=lambda s: ("float", float(s)))


@pytest.mark.parametrize("writer", [_js_update, _py_update], ids=["yjs", "pycrdt"])
async def test_whole_numbers_in_maps_and_arrays_read_as_integers(
    client: httpx.AsyncClient, writer: Callable[[], str]
) -> None:
    """Yjs has one number type; Yrs hands every number to Python as a float,
    and a read wrote 1 as 1.0. Numbers read as JavaScript writes them
    (docs/data-model.md: as canonical JSON writes them): 1 is 1, -0 is 0."""
    update = writer()
    h = await issue(client)
    r = await op(client, h, "yd:nums", {"op": "update", "update": update})
    assert r.status_code == 200, r.text
    for at in ("", "&at=1"):
        r = await client.get(f"{BASE}/yd:nums?root=meta&as=map{at}", headers=h)
        assert r.status_code == 200, r.text
        assert _typed(r.text)["value"] == {
            "count": 1,
            "big": 2**40,
            "half": ("float", 1.5),
            "neg": -3,
            "huge": 10**16,
            "nested": {"n": 2, "list": [3, ("float", 0.25)]},
        }, r.text
        r = await client.get(f"{BASE}/yd:nums?root=list&as=array{at}", headers=h)
        assert r.status_code == 200, r.text
        assert _typed(r.text)["value"] == [1, ("float", 2.5), 0], r.text


async def test_a_root_read_as_a_kind_that_shows_nothing_says_which_kinds_show_it(
    client: httpx.AsyncClient,
) -> None:
    """A Yjs update does not say which kind a root is, so a map read as text
    (the default kind) is empty: the answer says which kinds show content
    (``content_as``, the likeliest first), or the reader takes it for empty.
    Left out where the value has content or no kind shows any."""
    doc: Doc[Any] = Doc(client_id=5)
    with doc.transaction():
        doc.get("meta", type=Map)["title"] = "notes"
        doc.get("body", type=XmlFragment).children.append(XmlElement("p", {}, ["hi"]))
        doc.get("content", type=Text).insert(0, "hello")
        doc.get("blank", type=Map)
    h = await issue(client)
    update = base64.b64encode(doc.get_update()).decode()
    r = await op(client, h, "yd:kinds", {"op": "update", "update": update})
    assert r.status_code == 200, r.text
    for query, value, content_as in (
        ("root=meta", "", ["map"]),
        ("root=meta&as=array", [], ["map"]),
        ("root=meta&as=xml&at=1", "", ["map"]),
        ("root=body&as=map", {}, ["xml"]),
        ("root=content&as=map", {}, ["text", "array", "xml"]),
        ("root=meta&as=map", {"title": "notes"}, None),
        ("root=content", "hello", None),
        ("root=blank&as=text", "", None),
        ("root=missing&as=map", {}, None),
    ):
        r = await client.get(f"{BASE}/yd:kinds?{query}", headers=h)
        assert r.status_code == 200, (query, r.text)
        answer = r.json()
        assert answer["value"] == value, (query, r.text)
        assert answer.get("content_as") == content_as, (query, r.text)


async def _typed_text(
    client: httpx.AsyncClient, h: dict[str, str], crdt_id: str, pieces: int
) -> str:
    """A text typed in ``pieces`` inserts at both ends (one Yjs item each),
    written to ``crdt_id``; its content."""
    doc: Doc[Any] = Doc(client_id=6)
    text = doc.get("content", type=Text)
    for i in range(pieces):
        text.insert(len(text) if i % 2 else 0, "abcdefghij" * 10)
    update = base64.b64encode(doc.get_update()).decode()
    r = await op(client, h, crdt_id, {"op": "update", "update": update})
    assert r.status_code == 200, r.text
    return str(text)


async def test_a_text_typed_in_pieces_reads_as_a_map_with_the_kinds_that_show_it(
    client: httpx.AsyncClient,
) -> None:
    """Working out ``content_as`` of a text read as a map: each kind is tested
    without its view (the view of a long text as an array was quadratic:
    tests/crdt/test_ydoc_root_cost.py holds the cost)."""
    h = await issue(client)
    await _typed_text(client, h, "yd:long", 1000)
    r = await client.get(f"{BASE}/yd:long?root=content&as=map", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["content_as"] == ["text", "array", "xml"], r.text


async def test_a_text_typed_in_pieces_reads_as_an_array_of_its_characters(
    client: httpx.AsyncClient,
) -> None:
    """``?root=NAME&as=array`` of a text: its characters, in one pass
    (tests/crdt/test_ydoc_root_cost.py holds the cost)."""
    h = await issue(client)
    content = await _typed_text(client, h, "yd:long", 1000)
    r = await client.get(f"{BASE}/yd:long?root=content&as=array", headers=h)
    assert r.status_code == 200, r.text
    assert "".join(r.json()["value"]) == content


async def test_a_root_read_decodes_the_document_once_and_a_large_one_off_the_event_loop(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root read decoded the whole document on the event loop, once for the
    value and up to four times more for ``content_as`` (0.37 s for 2 MB,
    seconds near the CRDT limit, every other request waiting). It decodes
    it once, and a large one in a thread."""
    h = await issue(client)
    await _typed_text(client, h, "yd:small", 2)
    content = await _typed_text(client, h, "yd:large", 1000)  # 100 KB: decoded in a thread
    calls: list[bool] = []
    apply_update = Doc.apply_update

    def counted(doc: Doc[Any], update: bytes) -> None:
        calls.append(threading.current_thread() is threading.main_thread())
        apply_update(doc, update)

    monkeypatch.setattr(Doc, "apply_update", counted)
    for crdt_id in ("yd:small", "yd:large"):
        for query, kinds in (("as=map", ["text", "array", "xml"]), ("as=text", None)):
            calls.clear()
            r = await client.get(f"{BASE}/{crdt_id}?root=content&{query}", headers=h)
            assert r.status_code == 200, r.text
            assert r.json().get("content_as") == kinds, r.text
            assert len(calls) == 1, (crdt_id, query, calls)
            if crdt_id == "yd:large":
                assert calls == [False], (crdt_id, query, calls)
    calls.clear()
    r = await client.get(f"{BASE}/yd:large?root=content&as=array&at=1", headers=h)
    assert "".join(r.json()["value"]) == content
    assert calls[-1] is False, calls  # before it, the past's rebuild (syncd.history)


async def test_root_reads_whose_clients_left_still_count_against_the_decoding_threads(
    server: RunningServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most MAX_ROOT_READ_THREADS ``?root=`` reads decode in threads at
    once, each holding a decoded copy of its document: a client that left
    (its request cancelled) gave its turn back while its decode went on, so
    clients that ask and hang up could run as many at once as the default
    executor has threads."""
    h = await issue(client)
    await _typed_text(client, h, "yd:large", 1000)  # decoded in a thread
    running, most = 0, 0
    lock = threading.Lock()
    apply_update = Doc.apply_update

    def slow(doc: Doc[Any], update: bytes) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.3)  # a large document's decode, long enough to overlap
        apply_update(doc, update)
        with lock:
            running -= 1

    monkeypatch.setattr(Doc, "apply_update", slow)
    request = (
        f"GET {BASE}/yd:large?root=content&as=map HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: {h['authorization']}\r\n\r\n"
    ).encode()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(request)
            await asyncio.sleep(0.05)  # the read starts its decode
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await asyncio.sleep(0.02)  # the reset reaches the server: the read is cancelled
    while running:
        await asyncio.sleep(0.05)
    assert most <= crdts.MAX_ROOT_READ_THREADS, most
    r = await client.get(f"{BASE}/yd:large?root=content&as=map", headers=h)
    assert r.status_code == 200 and r.json()["content_as"] == ["text", "array", "xml"], r.text


@pytest.mark.parametrize("nesting", ["types", "json"])
async def test_a_root_nested_too_deep_for_a_json_view_is_400_not_500(
    client: httpx.AsyncClient, nesting: str
) -> None:
    """A root read as a map or an array is built by recursion, as its JSON is
    written: arrays in arrays 3,000 deep (an update of 39 KB) or a JSON value
    nested as deep in one map entry raised RecursionError, a 500. Past
    MAX_VIEW_DEPTH levels the read is refused, saying how else to read it;
    a root as deep as that reads."""
    doc: Doc[Any] = Doc(client_id=4)
    for name, depth in (("deep", 3000), ("fits", ydoc.MAX_VIEW_DEPTH)):
        root = doc.get(name, type=Map)
        if nesting == "json":
            value: Any = 1
            for _ in range(depth - 1):  # the root map is the first level
                value = [value]
            root["k"] = value
        else:
            held: Any = root
            for _ in range(depth - 1):
                held["k"] = Map()
                held = held["k"]
    h = await issue(client)
    update = base64.b64encode(doc.get_update()).decode()
    r = await op(client, h, "yd:deep", {"op": "update", "update": update})
    assert r.status_code == 200, r.text
    r = await client.get(f"{BASE}/yd:deep?root=deep&as=map", headers=h)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request", r.text
    assert "format=crdt" in r.json()["message"], r.text
    r = await client.get(f"{BASE}/yd:deep?root=fits&as=map", headers=h)
    assert r.status_code == 200, r.text


def _nested_elements(parent: Any, levels: int) -> None:
    """``levels`` XmlElements, each in the one before, the first in ``parent``."""
    for _ in range(levels):
        parent = parent.children.append(XmlElement("p"))


async def test_xml_nested_too_deep_to_render_is_400_and_the_server_lives(
    spawn_server: Any,
) -> None:
    """Yrs writes a fragment's XML by recursion on the native stack: XML
    elements nested 40,000 deep (an update of 343 KB, a normal write) read
    as xml, or as anything else (content_as rendered it), or held in a map,
    overflowed it and the server died (SIGSEGV) for everyone. Past
    MAX_XML_DEPTH levels the read is refused, saying how else to read it,
    and xml still shows in content_as; a root as deep as that reads. In a
    server of its own: before the fix it died, and pytest with it would."""
    doc: Doc[Any] = Doc(client_id=4)
    with doc.transaction():
        # As deep as a write may nest types (ydoc_nesting.MAX_TYPE_DEPTH):
        # past MAX_XML_DEPTH levels of XML, the fragment the first.
        _nested_elements(doc.get("deep", type=XmlFragment), ydoc_nesting.MAX_TYPE_DEPTH)
        _nested_elements(doc.get("fits", type=XmlFragment), ydoc.MAX_XML_DEPTH - 1)
        held = XmlFragment()
        doc.get("held", type=Map)["k"] = held
        _nested_elements(held, ydoc_nesting.MAX_TYPE_DEPTH - 1)
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        h = await issue(client)
        update = base64.b64encode(doc.get_update()).decode()
        r = await op(client, h, "yd:deep", {"op": "update", "update": update})
        assert r.status_code == 200, r.text
        # A fragment held in a map (a type itself) can no longer be written
        # past MAX_XML_DEPTH levels of XML: as deep as a write may nest, it reads.
        r = await client.get(f"{BASE}/yd:deep?root=held&as=map", headers=h)
        assert r.status_code == 200, r.text
        for root, kind in (("deep", "xml"),):
            r = await client.get(f"{BASE}/yd:deep?root={root}&as={kind}", headers=h)
            assert r.status_code == 400, (root, kind, r.text)
            assert r.json()["error"] == "bad_request", r.text
            assert "format=crdt" in r.json()["message"], r.text
        r = await client.get(f"{BASE}/yd:deep?root=deep&as=map", headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["value"] == {} and r.json()["content_as"][0] == "xml", r.text
        r = await client.get(f"{BASE}/yd:deep?root=fits&as=xml", headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["value"].startswith("<p><p>"), r.text[:200]
        assert server.proc.poll() is None, server.log()


@pytest.mark.parametrize("kind", ["xml", "map"])
async def test_types_nested_too_deep_to_delete_are_refused_and_the_server_lives(
    spawn_server: Any, kind: str
) -> None:
    """Yrs deletes a type's children by recursion on the native stack: XML
    elements (or maps) nested 40,000 deep, a 343 KB update, were taken as a
    normal write, and then a 6-byte update deleting the top one killed the
    server (SIGSEGV) for everyone. Past MAX_TYPE_DEPTH levels the write is
    refused (400 invalid_op), also when its chain hangs from a type an
    earlier write made; one that deep is taken, and deleted. In a server of
    its own: before the fix it died."""
    doc: Doc[Any] = Doc(client_id=5)

    def chain(parent: Any, levels: int) -> Any:
        for _ in range(levels):
            if kind == "xml":
                parent = parent.children.append(XmlElement("p"))
            else:
                parent["k"] = Map()
                parent = parent["k"]
        return parent

    def root() -> Any:
        return doc.get("r", type=XmlFragment if kind == "xml" else Map)

    def bottom() -> Any:
        node = root()
        while True:
            if kind == "xml":
                if not len(node.children):
                    return node
                node = node.children[0]
            elif "k" not in node:
                return node
            else:
                node = node["k"]

    def write(update: bytes) -> Any:
        text = base64.b64encode(update).decode()
        return op(client, h, f"yd:{kind}", {"op": "update", "update": text})

    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        h = await issue(client)
        with doc.transaction():
            top = chain(root(), 2000)
        r = await write(doc.get_update())
        assert r.status_code == 200, r.text
        state = doc.get_state()
        deep = Doc(client_id=6)
        deep.apply_update(doc.get_update())
        with doc.transaction():
            chain(top, 38_000)  # 40,000 in all, hung from the first write's
        r = await write(doc.get_update(state))
        assert r.status_code == 400 and r.json()["error"] == "invalid_op", r.text
        assert str(ydoc_nesting.MAX_TYPE_DEPTH) in r.json()["message"], r.text
        doc = deep  # as the server has it
        state = doc.get_state()
        with doc.transaction():
            chain(bottom(), ydoc_nesting.MAX_TYPE_DEPTH - 2000)
        r = await write(doc.get_update(state))
        assert r.status_code == 200, r.text
        state = doc.get_state()
        with doc.transaction():
            if kind == "xml":
                del root().children[0]
            else:
                del root()["k"]
        r = await write(doc.get_update(state))
        assert r.status_code == 200, r.text
        r = await client.get(f"{BASE}/yd:{kind}", headers=h)
        assert r.status_code == 200, r.text
        assert server.proc.poll() is None, server.log()


def _nested_value_update(levels: int) -> bytes:
    """A Yjs update (v1) setting key "k" of root map "m" to arrays nested
    ``levels`` deep around a null, written byte by byte: pycrdt and Yjs build
    a value that deep by recursion."""
    item = bytes([0x28, 1, 1]) + b"m" + bytes([1]) + b"k"  # any, in root "m", key "k"
    value = bytes([117, 1]) * levels + bytes([126])  # [[…[null]…]]
    return bytes([1, 1, 4, 0]) + item + bytes([1]) + value + bytes([0])


async def test_a_value_nested_too_deep_for_yrs_is_refused_and_the_server_lives(
    spawn_server: Any,
) -> None:
    """Yrs decodes a value of an update by recursion on the native stack:
    arrays in arrays 30,000 deep, an update of 60 KB, killed the server
    (SIGSEGV) on the write, before anything was stored. Past
    MAX_VALUE_DEPTH levels the update is refused (400 invalid_op); one that
    deep is taken. In a server of its own: before the fix it died."""
    server = spawn_server({})
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        h = await issue(client)
        deep = base64.b64encode(_nested_value_update(30_000)).decode()
        r = await op(client, h, "yd:value", {"op": "update", "update": deep})
        assert r.status_code == 400 and r.json()["error"] == "invalid_op", r.text
        assert str(ydoc_nesting.MAX_VALUE_DEPTH) in r.json()["message"], r.text
        fits = _nested_value_update(ydoc_nesting.MAX_VALUE_DEPTH)
        r = await op(
            client, h, "yd:value", {"op": "update", "update": base64.b64encode(fits).decode()}
        )
        assert r.status_code == 200, r.text
        assert server.proc.poll() is None, server.log()
