"""The listing route's query (docs/http-api.md#listing-crdts): ``prefix``,
``limit`` and ``cursor``, each used or refused with 400 naming it, never
dropped; the route itself is in crdts.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from syncd.crdt.engine import MAX_LIST_LIMIT
from syncd.errors import bad_request
from syncd.http.handlers.history import parse_limit
from syncd.http.request import Request
from syncd.ids import CRDT_ID_RE

DEFAULT_LIST_LIMIT: Final = 100
LIST_PARAMS: Final = ("prefix", "limit", "cursor")
ID_CHARACTERS: Final = "A-Z a-z 0-9 . _ : ~ @ + = -"
"""What an id is made of (syncd.ids.CRDT_ID_RE), for the messages."""
MAX_ID_CHARS: Final = 256
"""The longest id (syncd.ids.CRDT_ID_RE): the longest prefix or cursor that may match one."""
PLUS_HINT: Final = " (a + in an id is sent as %2B: a bare + in a query is a space)"
"""For a value with a space: a client that put a ``next`` such as ``gc:a+b``
into the query unencoded sent ``gc:a b``, which once answered the same page
again, for ever, as that sorts just before ``gc:a+b``."""


@dataclass(frozen=True, slots=True)
class ListingQuery:
    prefix: str
    limit: int
    cursor: str | None


def parse_listing_query(request: Request) -> ListingQuery:
    """The page asked for, or 400 naming the parameter at fault.

    ``prefix`` and ``cursor`` are compared with ids, so text no id can hold
    is refused rather than passed on: a NUL reached PostgreSQL, which
    refuses it in any text, as a 500."""
    if not request.query_string:
        return ListingQuery("", DEFAULT_LIST_LIMIT, None)
    query = request.known_query(LIST_PARAMS)
    prefix = query.get("prefix", "")
    if prefix and CRDT_ID_RE.fullmatch(prefix) is None:
        raise bad_request(
            f"prefix: at most {MAX_ID_CHARS} characters of {ID_CHARACTERS}, as ids are{_hint(prefix)}"
        )
    cursor = query.get("cursor") or None  # empty: the first page
    if cursor is not None and CRDT_ID_RE.fullmatch(cursor) is None:
        raise bad_request(f"cursor: the next of a previous page (an id) is required{_hint(cursor)}")
    limit = parse_limit(query["limit"], MAX_LIST_LIMIT) if "limit" in query else DEFAULT_LIST_LIMIT
    return ListingQuery(prefix, limit, cursor)


def _hint(value: str) -> str:
    return PLUS_HINT if " " in value else ""
