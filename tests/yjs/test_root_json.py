"""A Yjs document's root read as JSON over HTTP (``?root=NAME&as=map|array``)
when it holds values JSON has no word for, on a real server, the document
written by a pycrdt provider over y-websocket.

Yjs maps and arrays hold binary (``Uint8Array``), any float (NaN and the
infinities among them) and subdocuments. Read over HTTP, binary was a 500
(``bytearray is not JSON serializable``, with a stack trace in the log), a
subdocument too, and a NaN made the answer invalid JSON (``NaN``). Binary
reads as base64, as the API gives every binary; a float JSON cannot hold as
``null``, as ``JSON.stringify`` writes it; a subdocument as ``{"guid"}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from pycrdt import Array, Doc, Map, XmlElement, XmlFragment

from syncd.yjs.protocol import sync_step2
from tests.conftest import RunningServer
from tests.http.support import issue

CRDT = "/v1/namespaces/app/crdts/yd:notes"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


async def test_binary_non_finite_floats_and_subdocuments_read_as_json(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    headers = await issue(client)
    token = headers["authorization"].removeprefix("Bearer ")
    doc: Doc[Any] = Doc()
    meta = doc.get("meta", type=Map)
    sub: Doc[Any] = Doc()
    with doc.transaction():
        meta["bytes"] = b"\x01\x02\xff"
        meta["nan"] = math.nan
        meta["inf"] = -math.inf
        meta["sub"] = sub
        meta["plain"] = {"n": 1.5, "s": "x"}
        doc.get("list", type=Array).extend([b"\x00", math.inf, 2, Doc()])
    ws = await websockets.connect(
        f"ws://127.0.0.1:{server.port}/v1/namespaces/app/yjs/notes?token={token}"
    )
    await ws.send(sync_step2(doc.get_update()))
    await ws.close()
    for _ in range(250):
        r = await client.get(CRDT, headers=headers)
        if r.status_code == 200:
            break
        await asyncio.sleep(0.02)

    r = await client.get(f"{CRDT}?root=meta&as=map", headers=headers)
    assert r.status_code == 200, r.text
    value = json.loads(r.text, parse_constant=lambda name: pytest.fail(f"not JSON: {name}"))[
        "value"
    ]
    assert value == {
        "bytes": "AQL/",
        "nan": None,
        "inf": None,
        "sub": {"guid": sub.guid},
        "plain": {"n": 1.5, "s": "x"},
    }
    r = await client.get(f"{CRDT}?root=list&as=array&at=1", headers=headers)
    assert r.status_code == 200, r.text
    items = json.loads(r.text, parse_constant=lambda name: pytest.fail(f"not JSON: {name}"))[
        "value"
    ]
    assert items[:3] == ["AA==", None, 2] and set(items[3]) == {"guid"}


async def test_xml_held_anywhere_reads_as_its_xml_text_not_a_500(
    client: httpx.AsyncClient,
) -> None:
    """A root that holds XML (a ProseMirror or TipTap document) read as an
    array, and an XML fragment kept in a map, answer with their XML text:
    pycrdt's to_py raises for XML types, which gave 500 internal."""
    headers = await issue(client)
    doc: Doc[Any] = Doc()
    with doc.transaction():
        doc.get("default", type=XmlFragment).children.append(XmlElement("p", {}, ["hi"]))
        fragment = XmlFragment()
        doc.get("meta", type=Map)["body"] = fragment
        fragment.children.append(XmlElement("b"))
    update = base64.b64encode(doc.get_update()).decode()
    r = await client.post(f"{CRDT}/ops", json={"op": "update", "update": update}, headers=headers)
    assert r.status_code == 200, r.text
    for query, expected in (
        ("root=default&as=array", ["<p>hi</p>"]),
        ("root=default&as=xml", "<p>hi</p>"),
        ("root=meta&as=map", {"body": "<b></b>"}),
        ("root=meta&as=map&at=1", {"body": "<b></b>"}),
    ):
        r = await client.get(f"{CRDT}?{query}", headers=headers)
        assert r.status_code == 200, (query, r.text)
        assert r.json()["value"] == expected, (query, r.text)
