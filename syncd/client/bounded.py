"""Tool results that fit a language model's context (docs/clients.md#large-values).

A CRDT's value has no size bound an agent can rely on: a set of a hundred
thousand elements or a long text reads as megabytes of JSON, which would
crowd everything else out of a model's context (or be refused by its API).
So every result the agent tools give is measured, as the JSON text a model
reads, against a limit (:data:`DEFAULT_MAX_RESULT_CHARS` unless the tools are
given another), and one over it is cut to a page that fits and says so:

- ``"truncated": true``, the ``offset`` it starts at, ``next_offset`` (where
  the next page starts; null on the last page), ``total`` and the ``unit``
  they count (``characters``, ``elements`` or ``entries``), and a
  ``message`` saying how to read on (the read tool's ``offset``);
- a text (an ``rga`` of characters, a string value, a Yjs root read as text
  or XML) is paged by characters, a list by elements, a map by entries (in
  key order), and any other value (a tree, say) by the characters of its
  JSON text, given as the string ``value_json``;
- the view's other fields (a counter's per-client counts, a presence map's
  expiries) are left out of a cut result and named in ``omitted``.

History listings are cut to the changes that fit, newest first, with ``next``
pointing at the older ones, and a change too large on its own shows the
start of its op's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

DEFAULT_MAX_RESULT_CHARS: Final = 16_000
"""The longest tool result, in characters of its JSON text: about 4,000
tokens, a small part of any current model's context, and room for a page of
text or a few hundred set elements."""

MIN_MAX_RESULT_CHARS: Final = 1_000
"""The smallest limit the tools accept: below it a cut result's own fields
(id, seq, offsets, the message) would leave no room for the value."""

PREVIEW_CHARS: Final = 200
"""How much of one element or change too large for a page is shown."""

_KEPT: Final = ("id", "type", "seq", "epoch", "root", "as", "duplicate")
"""The view's fields a cut result keeps: they say what was read, and are small."""

Result = dict[str, Any]


def size(result: Any) -> int:
    """The length of ``result`` as the JSON text a model reads (MCP sends it
    unescaped, so a non-ASCII character counts once)."""
    return len(json.dumps(result, ensure_ascii=False))


def check_limit(max_chars: object) -> int:
    """``max_chars`` if it is a usable limit; ValueError otherwise."""
    if type(max_chars) is not int or max_chars < MIN_MAX_RESULT_CHARS:
        raise ValueError(
            f"max_result_chars {max_chars!r}: a whole number, at least {MIN_MAX_RESULT_CHARS}"
        )
    return max_chars


def bound_value(
    result: Result, crdt_type: str, *, offset: int, max_chars: int, read_more: str
) -> Result:
    """``result`` (``{"ok": true, ..., "value": ...}``) whole when it fits and
    ``offset`` is 0, else the page of its value from ``offset`` that fits.
    ``read_more`` names the call that reads on (``service_read_x``)."""
    if offset == 0 and size(result) <= max_chars:
        return result
    text = result.get("text")
    if crdt_type == "rga" and isinstance(text, str):
        # An rga of characters: its value is the same text one character per
        # element, so the page gives the text only.
        return _page(result, "text", text, offset, max_chars, read_more, drop=("value",))
    value = result.get("value")
    if isinstance(value, str):
        return _page(result, "value", value, offset, max_chars, read_more)
    if isinstance(value, list):
        return _page(result, "value", value, offset, max_chars, read_more)
    if isinstance(value, dict) and crdt_type != "tree":
        return _page(result, "value", value, offset, max_chars, read_more)
    if offset == 0:
        trimmed = _trimmed(result, ("value",))
        if size(trimmed) <= max_chars:
            return trimmed  # only the extra fields were too large
    # A tree, a large number or whatever else: its JSON text, by characters.
    return _page(
        result,
        "value_json",
        json.dumps(value, ensure_ascii=False),
        offset,
        max_chars,
        read_more,
        drop=("value",),
    )


def _trimmed(result: Result, keep: Sequence[str]) -> Result:
    """``result`` with only its identifying fields and ``keep``, plus the
    names of the others in ``omitted`` (and ``truncated``)."""
    out: Result = {"ok": result.get("ok", True)}
    omitted = []
    for name, field in result.items():
        if name in _KEPT:
            out[name] = field
        elif name not in keep and name != "ok":
            omitted.append(name)
    for name in keep:
        if name in result:
            out[name] = result[name]
    out["truncated"] = True
    out["omitted"] = omitted
    out["message"] = (
        f"Left out to stay within the result limit: {', '.join(omitted)} (the value is whole)."
    )
    return out


def _page(
    result: Result,
    field: str,
    whole: str | list[Any] | dict[str, Any],
    offset: int,
    max_chars: int,
    read_more: str,
    *,
    drop: Sequence[str] = (),
) -> Result:
    """The page of ``whole`` (a string, list or map) from ``offset`` that fits
    ``max_chars``, under ``field``, with the paging fields."""
    if isinstance(whole, str):
        items: Sequence[Any] = whole
        unit = "characters" if field != "value_json" else "characters of the value's JSON"
    elif isinstance(whole, list):
        items, unit = whole, "elements"
    else:
        items, unit = sorted(whole.items()), "entries"
    total = len(items)
    start = min(offset, total)

    def build(count: int, oversized: Result | None = None) -> Result:
        window = items[start : start + count]
        shown: Any = dict(window) if isinstance(whole, dict) else window
        end = start + count + (1 if oversized else 0)
        page: Result = {"ok": result.get("ok", True)}
        for name in _KEPT:
            if name in result:
                page[name] = result[name]
        page[field] = shown
        page.update(
            truncated=True,
            offset=start,
            next_offset=end if end < total else None,
            total=total,
            unit=unit,
            omitted=[n for n in result if n not in _KEPT and n not in (field, "ok", *drop)],
        )
        if oversized is None:
            page["message"] = _message(start, start + count, end, total, unit, read_more, offset)
        else:
            page["too_large"] = oversized
            page["message"] = (
                f"The {unit[:-1]} at offset {start} is too large to show "
                f"({oversized['json_chars']} characters of JSON): too_large.preview is its "
                "start. " + (f"Read on with {read_more} and offset={end}." if end < total else "")
            ).strip()
        return page

    # Every element or character takes at least one character of JSON: no
    # page holds more than max_chars of them, which keeps each probe small.
    count = _largest(lambda n: size(build(n)) <= max_chars, min(total - start, max_chars))
    if count == 0 and start < total and isinstance(whole, str):
        # The page's own fields leave no room (a long id and root name): one
        # character anyway, a little over the limit, rather than an empty page
        # whose next_offset is its own offset, asked for again for ever.
        return build(1)
    if count == 0 and start < total:
        # One element too large for any page: show its start and step past it,
        # so that paging never stalls on it.
        item = items[start]
        text = json.dumps(item[1] if isinstance(whole, dict) else item, ensure_ascii=False)
        oversized: Result = {
            "offset": start,
            "json_chars": len(text),
            "preview": text[:PREVIEW_CHARS],
        }
        if isinstance(whole, dict):
            oversized["key"] = item[0]
        return build(0, oversized)
    return build(count)


def _largest(fits: Callable[[int], bool], most: int) -> int:
    """The largest n in [0, most] with ``fits(n)`` (``fits`` is monotone and
    ``fits(0)`` is assumed): a binary search, each probe one small encode."""
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _message(
    start: int, shown_end: int, end: int, total: int, unit: str, read_more: str, asked: int
) -> str:
    if asked > total:
        return f"offset {asked} is past the end: the value has {total} {unit}."
    what = f"{unit} {start} to {shown_end - 1}" if shown_end > start else f"no {unit}"
    note = f"This is {what} of {total}"
    if end < total:
        return (
            f"{note}: the value is too large to return whole. "
            f"Read on with {read_more} and offset={end}; the value may change between "
            "calls (compare seq)."
        )
    return f"{note}; it is the end of the value."


def bound_history(page: Result, *, max_chars: int, read_more: str) -> Result:
    """A history result cut to the changes that fit (newest first), with
    ``next`` the version to pass as ``before`` for the rest."""
    if size(page) <= max_chars:
        return page
    changes: list[Any] = list(page.get("changes") or [])

    def build(count: int) -> Result:
        kept = changes[:count]
        cut: Result = {**page, "changes": kept, "truncated": True}
        if count < len(changes) and kept:
            cut["next"] = kept[-1].get("seq") if isinstance(kept[-1], Mapping) else None
            cut["message"] = (
                f"Only the newest {count} of {len(changes)} changes fit the result limit: "
                f"call {read_more} with before={cut['next']} for older ones."
            )
        return cut

    count = _largest(lambda n: size(build(n)) <= max_chars, len(changes))
    if count == 0 and changes and isinstance(changes[0], Mapping):
        # The newest change alone is too large: show the start of its op.
        first = dict(changes[0])
        text = json.dumps(first.pop("op", None), ensure_ascii=False)
        first["op_preview"] = text[:PREVIEW_CHARS]
        first["op_json_chars"] = len(text)
        changes[0] = first
        count = 1
        cut = build(1)
        if len(changes) == 1:
            cut["message"] = "This change's op is too large to show whole: op_preview is its start."
        else:
            cut["message"] = (
                "This change's op is too large to show whole: op_preview is its start. "
                f"Call {read_more} with before={first.get('seq')} for older changes."
            )
        return cut
    return build(count)
