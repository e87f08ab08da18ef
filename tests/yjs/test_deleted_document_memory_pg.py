"""On PostgreSQL a node remembers the Yjs documents it deleted itself
(syncd.crdt.ydoc.DeletedYDocs): the state vector is taken from its memory
before the delete is committed. Another node of the cluster does not know
of the deletion (the memory is per node, in memory), so a stale editor that
reconnects to it creates the document again, as before."""

from __future__ import annotations

import base64
from typing import Any

from pycrdt import Doc, Text

from syncd.auth.authenticator import ROOT
from tests.store.pgnodes import NS, StartNode, eventually


async def test_the_deleting_node_remembers_the_others_do_not(start_node: StartNode) -> None:
    a = await start_node("a")
    b = await start_node("b")
    stale: Doc[Any] = Doc()
    stale.get("content", type=Text).insert(0, "deleted content")
    update = stale.get_update()
    body = {"op": "update", "update": base64.b64encode(update).decode()}
    await a.service.apply_ops(NS, "yd:notes", body, ROOT, "http")
    assert await b.service.ensure(NS, "yd:notes") is not None
    assert await a.service.delete(NS, "yd:notes")
    assert a.service.deleted_ydocs.brings_back(NS, "yd:notes", update)
    await eventually(lambda: b.engine.get(NS, "yd:notes") is None)
    assert not b.service.deleted_ydocs.brings_back(NS, "yd:notes", update)
    fresh: Doc[Any] = Doc()
    fresh.get("content", type=Text).insert(0, "new")
    assert not a.service.deleted_ydocs.brings_back(NS, "yd:notes", fresh.get_update())
