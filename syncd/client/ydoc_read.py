"""A Yjs document as an agent can read it (docs/clients.md#yjs-documents).

The read view of a ``ydoc`` is one binary Yjs update in base64: exact, and
of no use to a language model. The agent tools decode it here, with the
function the service's ``?root=NAME&as=KIND`` read uses
(:func:`syncd.crdt.ydoc.read_root_view`), so that a tool call can name a root type
and how to read it and get text, JSON or XML back. Decoding on the client
works for every id a ``ydoc`` can have: the service's ``?root=`` read takes
only ``yd:`` ids.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from typing import Any, Final

from pycrdt import Doc

from syncd.crdt.ydoc import ROOT_KINDS, ViewTooDeep, read_root_view

MAX_ROOT_NAME: Final = 256
"""The longest root name, as the service's ``?root=`` takes."""

DEFAULT_KIND: Final = "text"
"""How a root is read when the call does not say, as the service's default."""

ROOTS_HINT: Final = (
    "A Yjs document: read one of its roots with root=NAME and as=text, map, array or xml "
    "(TipTap and ProseMirror keep theirs in root 'default', read as xml; a Yjs update does "
    "not say which kind a root is)."
)


class YdocReadError(ValueError):
    """The update does not decode, or the root cannot be read that way."""


def _document(view: Mapping[str, Any]) -> Doc[Any]:
    update = view.get("value")
    doc: Doc[Any] = Doc()
    if not isinstance(update, str):
        raise YdocReadError("the service's answer holds no Yjs update")
    try:
        doc.apply_update(binascii.a2b_base64(update))
    except (ValueError, binascii.Error) as exc:
        raise YdocReadError(f"the Yjs update does not decode: {exc}") from None
    return doc


def roots_view(view: Mapping[str, Any]) -> dict[str, Any]:
    """The document's root names, for a call that named none."""
    roots = sorted(_document(view).keys())
    out = {name: view[name] for name in ("id", "type", "seq", "epoch") if name in view}
    out["roots"] = roots
    out["message"] = ROOTS_HINT if roots else "The Yjs document is empty: it has no roots."
    return out


def root_read(view: Mapping[str, Any], root: str, kind: str) -> dict[str, Any]:
    """The read view of root ``root`` read as ``kind``, shaped as the
    service's ``?root=&as=`` answer; YdocReadError for a root the document
    does not have (the list says which it has) or one that cannot be read
    as ``kind``."""
    doc = _document(view)
    roots = sorted(doc.keys())
    if root not in roots:
        have = ", ".join(repr(name) for name in roots) or "none"
        raise YdocReadError(f"the Yjs document has no root {root!r}; its roots: {have}")
    try:
        value, others = read_root_view(binascii.a2b_base64(view["value"]), root, kind)
    except ViewTooDeep as exc:
        # No kind shows it: not "try as=xml", which the XML itself can be.
        raise YdocReadError(
            f"root {root!r} read as {kind} is {exc}, more than can be shown; "
            "decode the document's update with a Yjs library"
        ) from None
    except ValueError as exc:
        # pycrdt cannot give some content in some kinds (an XML element read
        # as an array): say so, and how else to read it.
        raise YdocReadError(f"root {root!r} cannot be read as {kind}: {exc}; try as=xml") from None
    out = {name: view[name] for name in ("id", "type", "seq", "epoch") if name in view}
    out.update(root=root, **{"as": kind}, value=value)
    if others:
        # A root read as another kind than its own is empty (a map read as
        # text, the default; only an empty value has others): say how it
        # reads, or the model takes the root for empty.
        out["message"] = (
            f"Read as {kind}, this root is empty, but read as {' or '.join(others)} "
            f"it is not (a Yjs update does not say which kind a root is): "
            f"call again with as={others[0]!r}."
        )
    return out


__all__ = [
    "DEFAULT_KIND",
    "MAX_ROOT_NAME",
    "ROOTS_HINT",
    "ROOT_KINDS",
    "YdocReadError",
    "root_read",
    "roots_view",
]
