"""Namespace and CRDT id syntax (docs/data-model.md#identifiers).

Neither ever becomes a file name or SQL text.
"""

from __future__ import annotations

import re
from functools import lru_cache

from syncd.errors import invalid_id, invalid_namespace

NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CRDT_ID_RE = re.compile(r"[A-Za-z0-9._:~@+=-]{1,256}")


# Valid names repeat request after request; a cache hit is cheaper than the
# regex. Refusals raise and are not cached.
@lru_cache(maxsize=4096)
def check_namespace(ns: str) -> str:
    if NAMESPACE_RE.fullmatch(ns) is None:
        raise invalid_namespace("namespace must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
    return ns


@lru_cache(maxsize=16384)
def check_crdt_id(crdt_id: str) -> str:
    if CRDT_ID_RE.fullmatch(crdt_id) is None:
        raise invalid_id("id must be 1-256 characters of A-Z a-z 0-9 . _ : ~ @ + = -")
    return crdt_id
