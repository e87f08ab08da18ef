"""A large Yjs document for the tests that its first load or first write
must not hold the event loop (the type-depth read, the build in a thread):
one map of :data:`ENTRIES` entries, about 1.4 MB, written in updates of
:data:`CHUNK` entries, and a one-entry keystroke after it."""

from __future__ import annotations

import base64
from typing import Any, Final

from pycrdt import Doc, Map

ENTRIES: Final = 80_000
"""Map entries of the document (one Yjs item each): about 1.4 MB."""

CHUNK: Final = 20_000
"""Entries written per HTTP op: within the body limit."""

WAIT_S: Final = 30.0


def map_chunks(client_id: int) -> list[str]:
    """The document's updates (base64), :data:`CHUNK` entries each, written
    by ``client_id``."""
    doc: Doc[Any] = Doc(client_id=client_id)
    entries = doc.get("m", type=Map)
    out: list[str] = []
    state = b"\x00"
    for start in range(0, ENTRIES, CHUNK):
        with doc.transaction():
            for i in range(start, start + CHUNK):
                entries[f"k{i}"] = i
        out.append(base64.b64encode(doc.get_update(state)).decode())
        state = doc.get_state()
    return out


def keystroke(client_id: int) -> bytes:
    """One more map entry (``typed``), by ``client_id``: an update's bytes."""
    doc: Doc[Any] = Doc(client_id=client_id)
    doc.get("m", type=Map)["typed"] = 1
    return doc.get_update()
