"""Agent tools: CRDTs as tool definitions for LLM tool calling, executed by HTTP.

Given ``(crdt_id, type)`` pairs, :func:`build_tools` makes the tools of
docs/clients.md#agent-tools (``service_read_<id>`` for every type, ``service_increment_<id>`` for
counters, ``service_set_<id>`` for registers, ``service_add_<id>`` for sets,
``service_history_<id>`` (read-only: recent changes, all or one writer's,
or the value at a version) for every type, ``service_restore_<id>`` for the
types that can go back and ``service_revert_<id>`` (take back one writer's
changes) for those that can take one writer's ops back,
with any other character than letters, digits and ``_`` written as ``_``), each with a
description and a JSON-schema input, in the two common shapes: OpenAI-style
function tools and Anthropic-style tools.

Any valid CRDT id may be given, prefixed ones such as ``gc:visits``
included: a call is resolved by looking its tool name up among the tools
built, never by parsing the id back out of it, so the only ids refused (with
ValueError) are invalid ones and two ids whose tool names would be the same
(``gc:a-b`` and ``gc:a_b``). The type comes from the pair and travels in each
op's ``type`` field.

:class:`AgentTools` (async) and :class:`SyncAgentTools` execute a call and
return a JSON-serializable result for the agent to read: ``{"ok": true, ...}``
with the new value, or ``{"ok": false, "error", "message"}``; they never
raise for an unknown tool, bad input or a refusal by the service. Given an
``origin`` (``agent:summarize-42``), every op the tools make carries it, so a
supervisor can list the task's changes (the history tool's ``origin``) and
take them all back (the revert tool) without touching anyone else's.

Every result fits ``max_result_chars`` (:mod:`syncd.client.bounded`): a
larger value comes back as a page that says how to read on with the read
tool's ``offset``. A Yjs document is read one root at a time, as text, JSON
or XML (:mod:`syncd.client.ydoc_read`), not as its binary update.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from syncd.client import ops
from syncd.client.bounded import (
    DEFAULT_MAX_RESULT_CHARS,
    bound_history,
    bound_value,
    check_limit,
    size,
)
from syncd.client.errors import (
    ClientError,
    ServiceError,
    TokenError,
    TokenExpiredError,
    TransportError,
)
from syncd.client.retry import RETRY_ATTEMPTS, new_op_id, with_retries, with_retries_sync
from syncd.client.sync import current_deadline
from syncd.client.ydoc_read import (
    DEFAULT_KIND,
    MAX_ROOT_NAME,
    ROOT_KINDS,
    ROOTS_HINT,
    YdocReadError,
    root_read,
    roots_view,
)
from syncd.crdt.types import TYPES, crdt_class, type_for_id
from syncd.errors import ApiError
from syncd.ids import check_crdt_id

if TYPE_CHECKING:
    from syncd.client.aio import AsyncClient
    from syncd.client.sync import Client

TOOL_PREFIX: Final = "service_"
"""Tool names begin ``service_``, like the metric and variable names."""

MAX_TOOL_NAME_LEN: Final = 64
"""OpenAI function names and Anthropic tool names are at most 64 characters
(``^[a-zA-Z0-9_-]{1,64}$``); a longer name would be refused by the API."""

MAX_HISTORY_LIMIT: Final = 50
"""Changes one history call returns at most: enough to see what happened
lately, few enough to stay a small part of a model's context."""

DEFAULT_HISTORY_LIMIT: Final = 10
"""Changes a history call lists when it names no ``limit``."""

MAX_AMOUNT: Final = 2**53 - 1
"""The service's largest counter step (docs/data-model.md#gcounter)."""

ACTIONS: Final[Mapping[str, frozenset[str]]] = {
    "read": frozenset(TYPES),
    "increment": frozenset({"gcounter", "pncounter"}),
    "set": frozenset({"lwwregister"}),
    "add": frozenset({"orset"}),
    "history": frozenset(TYPES),
    "restore": frozenset(t for t in TYPES if crdt_class(t).RESTORABLE),
    "revert": frozenset(t for t in TYPES if crdt_class(t).REVERTIBLE),
}
"""Tool action -> the CRDT types that get it (docs/clients.md#agent-tools)."""

_KIND: Final = {
    "gcounter": "grow-only counter",
    "pncounter": "counter (it can go up and down)",
    "orset": "set",
    "lwwregister": "register (last writer wins)",
    "presence": "presence map (who is here, with data each)",
    "rga": "sequence (text or a list)",
    "tree": "tree",
    "ydoc": "Yjs document (shared rich text)",
}

_ANY_JSON: Final = ["string", "number", "integer", "boolean", "object", "array", "null"]

MAX_ROOT_IN_MESSAGE: Final = 64
"""The longest root name (as its repr) a page's message repeats. A page
already names its root in its ``root`` field; a 256-character name said
twice leaves no room for the value under the smallest result limit
(``MIN_MAX_RESULT_CHARS``), so a longer one is referred to instead."""

DEFAULT_CALL_TIMEOUT_S: Final = 30.0
"""The longest one call of :class:`AgentTools` takes, retries and waits on
``Retry-After`` included, before it is stopped and answered with a
``timeout`` error: four attempts of up to 10 s each held a model's turn for
40 s and more, and MCP hosts give up on a tool call after 60 s (the SDKs'
default) with an error that tells the model nothing."""

TIMEOUT_RETRY_S: Final = 5.0
"""How long a call that timed out tells the model to wait before trying again
(``retry_after_s``): a slow or busy service, not a refusal."""

WRITING_ACTIONS: Final = frozenset({"increment", "set", "add", "restore", "revert"})
"""The actions whose call may have changed a CRDT when it was stopped."""

ORIGIN_MAX_LEN: Final = 128
"""The service's longest origin (docs/data-model.md#origins)."""

_WRITER: Final[dict[str, Any]] = {
    "client_id": {
        "type": "integer",
        "minimum": 0,
        "maximum": MAX_AMOUNT,
        "description": "Optional: only this writer's changes (its client id).",
    },
    "origin": {
        "type": "string",
        "minLength": 1,
        "maxLength": ORIGIN_MAX_LEN,
        "description": "Optional: only the changes made with this origin (a task, e.g. agent:x-1).",
    },
}

Result = dict[str, Any]

_OFFSET_MEANS: Final = (
    "where to start, for a value that came back cut short (its next_offset): characters "
    "of a text, elements of a list, entries of a map."
)

_OFFSET: Final[dict[str, Any]] = {
    "type": "integer",
    "minimum": 0,
    "default": 0,
    "description": f"Optional: {_OFFSET_MEANS}",
}

_YDOC_READ: Final = (
    " It is a Yjs document: name a root type with 'root' and how to read it with 'as' "
    "(text, map, array or xml) to get its content. Without 'root' it lists the roots "
    "(many of them in pages, read on with offset as for a value)."
)

_YDOC_ROOT: Final[dict[str, Any]] = {
    "root": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_ROOT_NAME,
        "description": "Optional: the root type to read (editors: TipTap and ProseMirror use "
        "'default').",
    },
    "as": {
        "type": "string",
        "enum": list(ROOT_KINDS),
        "default": DEFAULT_KIND,
        "description": "How to read the root: text, map, array or xml (TipTap and "
        "ProseMirror documents: xml).",
    },
}


def tool_name(action: str, crdt_id: str) -> str:
    """``service_<action>_<id>`` with every character of the id other than a
    letter, digit or ``_`` written as ``_`` (tool names allow ``[A-Za-z0-9_-]``)."""
    return f"{TOOL_PREFIX}{action}_{_NOT_NAME.sub('_', crdt_id)}"


_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9_]")


def parse_tool_name(name: str) -> tuple[str, str] | None:
    """``(action, id)`` of a tool name, the id with ``_`` read as ``-``, or None.
    Exact only for ids of letters, digits and hyphens; tools resolve names by
    lookup, not with this."""
    if not name.startswith(TOOL_PREFIX):
        return None
    action, sep, rest = name[len(TOOL_PREFIX) :].partition("_")
    if not sep or action not in ACTIONS or not rest:
        return None
    return action, rest.replace("_", "-")


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    crdt_id: str
    crdt_type: str
    action: str

    def openai(self) -> dict[str, Any]:
        """An OpenAI-style function tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }

    def anthropic(self) -> dict[str, Any]:
        """An Anthropic-style tool."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


def _tool(action: str, crdt_id: str, crdt_type: str) -> Tool:
    kind = _KIND[crdt_type]
    if action == "read":
        description = (
            f"Read the current value of the {kind} '{crdt_id}' ({crdt_type}). "
            "Returns its value and its version (seq). A value too large for one result "
            "comes back in part, with truncated: true and next_offset: call again with "
            "offset=next_offset for the rest."
        )
        properties: dict[str, Any] = {"offset": _OFFSET}
        if crdt_type == "ydoc":
            description += _YDOC_READ
            properties.update(_YDOC_ROOT)
        schema = _schema(properties, [])
    elif action == "increment":
        description = (
            f"Increase the {kind} '{crdt_id}' by a whole number (default 1). "
            "Returns the counter's new value."
        )
        schema = _schema(
            {
                "amount": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_AMOUNT,
                    "default": 1,
                    "description": "How much to add: a whole number, at least 1.",
                }
            },
            [],
        )
    elif action == "set":
        description = (
            f"Set the {kind} '{crdt_id}' to a value: a string, a number, an object, or any "
            "other JSON value. The latest write wins. Returns the register's new value."
        )
        schema = _schema(
            {
                "value": {
                    "type": _ANY_JSON,
                    "items": {},
                    "description": "The new value (any JSON: string, number, object, array...).",
                },
                "client_id": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Optional: the writer's client id; must be the token's own.",
                },
            },
            ["value"],
        )
    elif action == "history":
        description = (
            f"Look at the past of the {kind} '{crdt_id}' (read-only). Without input: its "
            "latest changes, newest first, each with its version (seq), who made it "
            "(client_id, and origin: the task, when it named one) and when (ts, ms). "
            "With 'client_id' or 'origin': only that writer's changes. With 'at': its value "
            "right after that version (with 'offset' for the rest of a value cut short). "
            "With 'before': the changes older than that version."
        )
        seq = {"type": "integer", "minimum": 0}
        extra: dict[str, Any] = {
            "offset": {**_OFFSET, "description": f"Optional, with 'at': {_OFFSET_MEANS}"}
        }
        if crdt_type == "ydoc":
            description += _YDOC_READ.replace("Without 'root'", "With 'at' and without 'root'")
            extra.update(_YDOC_ROOT)
        schema = _schema(
            {
                "at": {**seq, "description": "Optional: read the value as of this version."},
                "before": {**seq, "description": "Optional: only changes older than this."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_HISTORY_LIMIT,
                    "default": DEFAULT_HISTORY_LIMIT,
                    "description": "How many changes at most.",
                },
                **_WRITER,
                **extra,
            },
            [],
        )
    elif action == "revert":
        description = (
            f"Take back the changes one writer made to the {kind} '{crdt_id}' (by client_id, "
            "origin, or both), keeping everyone else's changes, by applying new ones (needs "
            "write permission). Find the writer with the history tool first. Returns the new "
            "value and how many changes were taken back."
        )
        seq = {"type": "integer", "minimum": 0}
        schema = _schema(
            {
                **_WRITER,
                "since_seq": {**seq, "description": "Optional: only changes from this version on."},
                "until_seq": {**seq, "description": "Optional: only changes up to this version."},
            },
            [],
        )
    elif action == "restore":
        description = (
            f"Restore the {kind} '{crdt_id}' to its value as of an earlier version (seq), "
            "undoing the changes made since by applying new ones (needs write permission). "
            "Find the version with the history tool first. Returns the new value."
        )
        schema = _schema(
            {
                "seq": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The version whose value to bring back.",
                }
            },
            ["seq"],
        )
    else:
        description = (
            f"Add an element (any JSON value) to the {kind} '{crdt_id}'. Adding an element "
            "that is already there changes nothing. Returns the set's elements."
        )
        schema = _schema(
            {
                "element": {
                    "type": _ANY_JSON,
                    "items": {},
                    "description": "The element to add (any JSON: string, number, object...).",
                }
            },
            ["element"],
        )
    return Tool(tool_name(action, crdt_id), description, schema, crdt_id, crdt_type, action)


def build_tools(crdts: Iterable[tuple[str, str]]) -> list[Tool]:
    """The tools for ``(crdt_id, type)`` pairs, in order; ValueError for an
    invalid CRDT id, an unknown type, a type other than the one the id's prefix
    fixes, a repeated id, two ids with the same tool names, or a tool name over
    :data:`MAX_TOOL_NAME_LEN`."""
    if isinstance(crdts, Mapping | str):
        raise ValueError(
            f"tool CRDTs are (crdt_id, type) pairs, not a {type(crdts).__name__}"
            + (": pass list(mapping.items())" if isinstance(crdts, Mapping) else "")
        )
    tools: list[Tool] = []
    seen: set[str] = set()
    names: dict[str, str] = {}
    for pair in crdts:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(f"tool CRDTs are (crdt_id, type) pairs, not {pair!r}")
        crdt_id, crdt_type = pair
        if not isinstance(crdt_id, str):
            raise ValueError(f"tool CRDT id {crdt_id!r}: a string is required")
        try:
            check_crdt_id(crdt_id)
        except ApiError as exc:
            raise ValueError(f"tool CRDT id {crdt_id!r}: {exc.message}") from None
        if crdt_type not in TYPES:
            raise ValueError(
                f"tool CRDT {crdt_id!r}: unknown type {crdt_type!r} (one of {', '.join(TYPES)})"
            )
        fixed = type_for_id(crdt_id)
        if fixed is not None and fixed != crdt_type:
            # Every op of such tools would be refused (type_mismatch), and
            # their descriptions would tell the model the wrong kind of value.
            raise ValueError(
                f"tool CRDT {crdt_id!r}: its prefix {crdt_id[:3]!r} makes it a {fixed}, "
                f"not a {crdt_type}"
            )
        if crdt_id in seen:
            raise ValueError(f"tool CRDT id {crdt_id!r} is given twice")
        seen.add(crdt_id)
        for action, types in ACTIONS.items():
            if crdt_type in types:
                tool = _tool(action, crdt_id, crdt_type)
                other = names.setdefault(tool.name, crdt_id)
                if other != crdt_id:
                    raise ValueError(
                        f"tool CRDT ids {other!r} and {crdt_id!r} would share the tool name "
                        f"{tool.name!r}; rename one"
                    )
                if len(tool.name) > MAX_TOOL_NAME_LEN:
                    raise ValueError(
                        f"tool name {tool.name!r} is longer than {MAX_TOOL_NAME_LEN} characters; "
                        "use a shorter id"
                    )
                tools.append(tool)
    return tools


def openai_tools(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    return [tool.openai() for tool in tools]


def anthropic_tools(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    return [tool.anthropic() for tool in tools]


# -- executing ----------------------------------------------------------------


class _InputError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error(code: str, message: str) -> Result:
    return {"ok": False, "error": code, "message": message}


def _arguments(arguments: Any) -> dict[str, Any]:
    """Tool input as a map; OpenAI hands it over as a JSON string."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            # RecursionError: nested deeper than the parser's recursion limit.
            raise _InputError("invalid_input", "the tool input is not valid JSON") from None
    if not isinstance(arguments, dict):
        raise _InputError("invalid_input", "the tool input must be a JSON object")
    if not all(isinstance(key, str) for key in arguments):
        # A JSON object's names are strings; other keys (a caller's own dict)
        # would break the checks that list unknown fields by name.
        raise _InputError("invalid_input", "the tool input's field names must be strings")
    return arguments


def _json_value(arguments: Mapping[str, Any], name: str) -> Any:
    """``arguments[name]`` if the service can take it as JSON: no NaN or
    Infinity (Python's json reads them, the service's JSON has none), only JSON
    types, not nested past the encoder's recursion limit, and text that UTF-8
    can carry (Python's json reads a lone surrogate escape, ``"\\ud800"``, that
    no request body can hold)."""
    value = arguments[name]
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
        raise _InputError(
            "invalid_input",
            f"{name} must be a JSON value (no NaN or Infinity, no unpaired surrogate, "
            "not nested too deep)",
        ) from None
    return value


def _utf8(text: str) -> bool:
    """Whether ``text`` can be sent (UTF-8 has no lone surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


_DECLARED_DEFAULTS: Final[Mapping[str, Any]] = {
    "offset": 0,
    "as": DEFAULT_KIND,
    "limit": DEFAULT_HISTORY_LIMIT,
}
"""The ``default`` each schema declares for these fields. Hosts and models
fill declared defaults in, so a field given its default is a field not given
when deciding which fields go together (``offset: 0`` without ``at``)."""


def _given(arguments: Mapping[str, Any], name: str) -> bool:
    """Whether ``name`` asks for something: not absent, null or its default."""
    value = arguments.get(name)
    if value is None:
        return False
    if name in _DECLARED_DEFAULTS and type(value) is not bool:
        return bool(value != _DECLARED_DEFAULTS[name])
    return True


def _only(arguments: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(arguments) - allowed)
    if extra:
        raise _InputError("invalid_input", f"unknown input field(s): {', '.join(extra)}")


@dataclass(frozen=True, slots=True)
class ReadCall:
    """Which part of a value to give: from ``offset``; for a Yjs document,
    which root (None: list them) and read how."""

    offset: int = 0
    root: str | None = None
    kind: str = DEFAULT_KIND


WHOLE: Final = ReadCall()
"""A value from its start, a Yjs document's roots listed: what the results
of ops, restores and reverts show."""


def _read_call(tool: Tool, arguments: Mapping[str, Any]) -> ReadCall:
    offset = _seq(arguments, "offset") or 0
    root = arguments.get("root")
    kind = arguments.get("as")
    if tool.crdt_type != "ydoc":
        return ReadCall(offset)
    if root is not None and (type(root) is not str or not 1 <= len(root) <= MAX_ROOT_NAME):
        raise _InputError(
            "invalid_input", f"root must be a string of 1 to {MAX_ROOT_NAME} characters"
        )
    if kind is not None:
        if kind not in ROOT_KINDS:
            raise _InputError("invalid_input", f"as must be one of {', '.join(ROOT_KINDS)}")
        if root is None and _given(arguments, "as"):
            raise _InputError("invalid_input", "'as' says how to read a root: name it with 'root'")
    return ReadCall(offset, root, kind or DEFAULT_KIND)


def plan_read(tool: Tool, raw: Any) -> ReadCall:
    """What a read call asks; _InputError on bad input."""
    arguments = _arguments(raw)
    _only(arguments, {"offset", "root", "as"} if tool.crdt_type == "ydoc" else {"offset"})
    return _read_call(tool, arguments)


def plan_op(tool: Tool, raw: Any) -> ops.Op | None:
    """The op a call of ``tool`` makes (None for a read); _InputError on bad input."""
    if tool.action == "read":
        plan_read(tool, raw)
        return None
    arguments = _arguments(raw)
    if tool.action == "increment":
        _only(arguments, {"amount"})
        amount = arguments.get("amount")
        if amount is None:  # absent or null: the default
            amount = 1
        if type(amount) is float and amount.is_integer():
            amount = int(amount)  # some models write 3.0
        if type(amount) is not int or not 1 <= amount <= MAX_AMOUNT:
            raise _InputError(
                "invalid_input", f"amount must be a whole number from 1 to {MAX_AMOUNT}"
            )
        build = ops.gcounter_increment if tool.crdt_type == "gcounter" else ops.pncounter_increment
        return build(amount)
    if tool.action == "set":
        _only(arguments, {"value", "client_id"})
        if "value" not in arguments:
            raise _InputError("invalid_input", "value is required")
        op = ops.lwwregister_set(_json_value(arguments, "value"))
        client_id = _seq(arguments, "client_id")
        if client_id is not None:
            op["client_id"] = client_id
        return op
    _only(arguments, {"element"})
    if "element" not in arguments:
        raise _InputError("invalid_input", "element is required")
    return ops.orset_add(_json_value(arguments, "element"))


def _seq(arguments: Mapping[str, Any], name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 0:
        raise _InputError("invalid_input", f"{name} must be a whole number, 0 or more")
    return value


@dataclass(frozen=True, slots=True)
class HistoryCall:
    at: int | None
    before: int | None
    limit: int
    client_id: int | None
    origin: str | None
    read: ReadCall = WHOLE


@dataclass(frozen=True, slots=True)
class RevertCall:
    client_id: int | None
    origin: str | None
    since_seq: int | None
    until_seq: int | None


def _writer(arguments: Mapping[str, Any]) -> tuple[int | None, str | None]:
    client_id = _seq(arguments, "client_id")
    origin = arguments.get("origin")
    if origin is not None and (
        type(origin) is not str or not 1 <= len(origin) <= ORIGIN_MAX_LEN or not _utf8(origin)
    ):
        raise _InputError(
            "invalid_input",
            f"origin must be a string of 1 to {ORIGIN_MAX_LEN} characters (no unpaired surrogate)",
        )
    return client_id, origin


def plan_history(raw: Any, tool: Tool | None = None) -> HistoryCall:
    """What a history call asks; _InputError on bad input."""
    arguments = _arguments(raw)
    reading = (
        {"offset", "root", "as"} if tool is not None and tool.crdt_type == "ydoc" else {"offset"}
    )
    _only(arguments, {"at", "before", "limit", "client_id", "origin", *reading})
    limit = arguments.get("limit")
    if limit is None:  # absent or null, as for the other optional fields
        limit = DEFAULT_HISTORY_LIMIT
    if type(limit) is float and limit.is_integer():
        limit = int(limit)
    if type(limit) is not int or not 1 <= limit <= MAX_HISTORY_LIMIT:
        raise _InputError(
            "invalid_input", f"limit must be a whole number from 1 to {MAX_HISTORY_LIMIT}"
        )
    client_id, origin = _writer(arguments)
    at, before = _seq(arguments, "at"), _seq(arguments, "before")
    if at is None:
        value_fields = [name for name in sorted(reading) if _given(arguments, name)]
        if value_fields:
            raise _InputError(
                "invalid_input",
                f"{', '.join(value_fields)} go with 'at' (they say how to read a value); "
                "a list of changes is paged with 'before'",
            )
    else:
        listing = [
            name for name in ("before", "limit", "client_id", "origin") if _given(arguments, name)
        ]
        if listing:
            # They choose changes to list; 'at' reads one value: silently
            # dropping them would answer a question the model did not ask.
            raise _InputError(
                "invalid_input",
                f"'at' reads the value at a version and cannot be combined with "
                f"{', '.join(listing)} (which list changes): call without 'at' for those",
            )
    read = _read_call(tool, arguments) if tool is not None else WHOLE
    return HistoryCall(at, before, limit, client_id, origin, read)


def plan_revert(raw: Any) -> RevertCall:
    """What a revert call asks; _InputError on bad input or no writer named."""
    arguments = _arguments(raw)
    _only(arguments, {"client_id", "origin", "since_seq", "until_seq"})
    client_id, origin = _writer(arguments)
    if client_id is None and origin is None:
        raise _InputError("invalid_input", "name whose changes to take back: client_id or origin")
    return RevertCall(client_id, origin, _seq(arguments, "since_seq"), _seq(arguments, "until_seq"))


def plan_restore(raw: Any) -> int:
    arguments = _arguments(raw)
    _only(arguments, {"seq"})
    seq = _seq(arguments, "seq")
    if seq is None:
        raise _InputError("invalid_input", "seq is required")
    return seq


def service_object(answer: object) -> Mapping[str, Any]:
    """``answer`` when it is a JSON object, as every answer of the service is;
    ServiceError ``bad_response`` otherwise (the base URL names another
    service), which the tools give back as an error result instead of failing
    on it (over MCP: a JSON-RPC error where a tool error is due)."""
    if not isinstance(answer, Mapping):
        raise ServiceError(
            200,
            "bad_response",
            "the service's answer is not a JSON object (does the base URL name a syncd service?)",
        )
    return answer


def history_result(page: Mapping[str, Any]) -> Result:
    page = service_object(page)
    return {
        "ok": True,
        "seq": page.get("seq"),
        "oldest": page.get("oldest"),
        "changes": page.get("ops", []),
        "next": page.get("next"),
    }


def read_result(view: Mapping[str, Any]) -> Result:
    return {"ok": True, **view}


def revert_result(answer: Mapping[str, Any], view: Mapping[str, Any]) -> Result:
    """The value after a revert, with how many changes it took back."""
    answer = service_object(answer)
    result = read_result(view)
    result["reverted"] = answer.get("matched", 0)
    result["applied"] = answer.get("applied", 0)
    return result


def op_result(answer: Mapping[str, Any]) -> Result:
    answer = service_object(answer)
    result: Result = {"ok": True, "seq": answer.get("seq")}
    state = answer.get("state")
    result["value"] = state.get("value") if isinstance(state, Mapping) else None
    if answer.get("duplicate"):
        result["duplicate"] = True
    return result


def error_result(exc: ClientError) -> Result:
    if isinstance(exc, ServiceError):
        if exc.retry_after is None:
            return _error(exc.code, exc.message)
        # A model told only "too many requests" retries at once and is
        # refused again: say how long the service asks it to wait.
        result = _error(exc.code, f"{exc.message}; try again in {exc.retry_after:g} s")
        result["retry_after_s"] = exc.retry_after
        return result
    if isinstance(exc, TransportError):
        return _error("unavailable", f"the service could not be reached: {exc}")
    if isinstance(exc, TokenError):
        code = "token_expired" if isinstance(exc, TokenExpiredError) else "invalid_token"
        return _error(code, str(exc))
    return _error("client_error", str(exc))


class _ToolSet:
    def __init__(
        self,
        crdts: Iterable[tuple[str, str]],
        origin: str | None = None,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        if (
            type(call_timeout_s) not in (int, float)
            or not math.isfinite(call_timeout_s)
            or call_timeout_s <= 0
        ):
            raise ValueError(f"call_timeout_s {call_timeout_s!r}: a number of seconds above 0")
        self.call_timeout_s = float(call_timeout_s)
        """The longest one call takes before a ``timeout`` result."""
        if origin is not None and (
            not isinstance(origin, str)
            or not 1 <= len(origin) <= ORIGIN_MAX_LEN
            or not _utf8(origin)
        ):
            raise ValueError(
                f"origin {origin!r}: a string of 1 to {ORIGIN_MAX_LEN} characters "
                "(no unpaired surrogate)"
            )
        self.origin = origin
        """What every op the tools make carries (docs/data-model.md#origins)."""
        self.max_result_chars = check_limit(max_result_chars)
        """The longest result, in characters of its JSON (docs/clients.md#large-values)."""
        self.tools = build_tools(crdts)
        self._by_name = {tool.name: tool for tool in self.tools}
        self._types = {tool.crdt_id: tool.crdt_type for tool in self.tools}

    def openai(self) -> list[dict[str, Any]]:
        return openai_tools(self.tools)

    def _timed_out(self, name: str) -> Result:
        tool = self._by_name.get(name)
        if tool is not None and tool.action in WRITING_ACTIONS:
            # Stopped between sending an op and its answer, the op may be in:
            # a new call makes a new op_id, and an increment would count twice.
            effect = (
                "the change may have been applied or not: read the value (or the history "
                "tool) before calling again"
            )
        else:
            effect = "nothing was changed"
        result = _error(
            "timeout",
            f"the call took longer than {self.call_timeout_s:g} s (the service is slow or "
            f"busy) and was stopped; {effect}. Try again in {TIMEOUT_RETRY_S:g} s.",
        )
        result["retry_after_s"] = TIMEOUT_RETRY_S
        return result

    def anthropic(self) -> list[dict[str, Any]]:
        return anthropic_tools(self.tools)

    def resolve(self, name: object) -> Tool:
        """The tool a name means (looked up among the tools built)."""
        tool = self._by_name.get(name) if isinstance(name, str) else None
        if tool is None:
            raise _InputError("unknown_tool", f"no tool named {name!r}")
        return tool

    # -- shaping results to fit a model's context ------------------------------

    def value_result(
        self, tool: Tool, result: Mapping[str, Any], call: ReadCall = WHOLE, at: int | None = None
    ) -> Result:
        """``result`` (a read view, or an op's answer with ``value``) as the
        agent gets it: a Yjs document decoded, a value too large for
        :attr:`max_result_chars` cut to a page that says how to read on."""
        result = service_object(result)
        if at is None:
            read_more = tool_name("read", tool.crdt_id)
        else:
            read_more = f"{tool_name('history', tool.crdt_id)} (at={at})"
        if tool.crdt_type == "ydoc" and "value" in result:
            try:
                if call.root is None:
                    return self._bounded_roots(roots_view(result), call.offset, read_more)
                result = root_read(result, call.root, call.kind)
            except YdocReadError as exc:
                raise _InputError("invalid_input", str(exc)) from None
        if call.root is not None:
            named = repr(call.root)
            root_hint = named if len(named) <= MAX_ROOT_IN_MESSAGE else "this result's root"
            read_more += f" (root={root_hint}, as={call.kind!r})"
        return bound_value(
            {"ok": True, **result},
            tool.crdt_type,
            offset=call.offset,
            max_chars=self.max_result_chars,
            read_more=read_more,
        )

    def _bounded_roots(self, view: Result, offset: int, read_more: str) -> Result:
        """The root names of a Yjs document: all of them when they fit, else
        (or from an ``offset``) the page of them from ``offset`` that fits,
        paged as a list value is (by elements, with ``next_offset``)."""
        whole: Result = {"ok": True, **view}
        if offset == 0 and size(whole) <= self.max_result_chars:
            return whole
        roots: list[str] = whole["roots"]
        total = len(roots)
        start = min(offset, total)

        def page(count: int) -> Result:
            end = start + max(count, 1)
            shown = roots[start : start + count]
            out: Result = {**whole, "roots": shown, "truncated": True, "offset": start}
            out.update(next_offset=end if end < total else None, total=total, unit="elements")
            if start >= total:
                what = f"offset {offset} is past the end: the document has {total} roots."
            elif count == 0:
                what = f"The root name at offset {start} is too long to show."
            else:
                what = f"These are roots {start} to {start + count - 1} of {total}."
            if end < total:
                what += f" Read on with {read_more} and offset={end} for more root names."
            out["message"] = f"{what} {ROOTS_HINT}"
            return out

        low, high = 0, total - start  # the most root names that fit: a binary search
        while low < high:
            mid = (low + high + 1) // 2
            if size(page(mid)) <= self.max_result_chars:
                low = mid
            else:
                high = mid - 1
        return page(low)

    def history_value(self, tool: Tool, page: Mapping[str, Any]) -> Result:
        return bound_history(
            history_result(page),
            max_chars=self.max_result_chars,
            read_more=tool_name("history", tool.crdt_id),
        )


class AgentTools(_ToolSet):
    """Tools over an :class:`AsyncClient`::

    tools = AgentTools(client, [("visits", "gcounter"), ("title", "lwwregister")])
    definitions = tools.anthropic()           # or tools.openai()
    result = await tools.execute("service_increment_visits", {"amount": 2})

    With ``origin="agent:task-1"`` every op the tools make carries that origin.
    ``max_result_chars`` bounds every result (docs/clients.md#large-values).
    """

    def __init__(
        self,
        client: AsyncClient,
        crdts: Iterable[tuple[str, str]],
        *,
        attempts: int = RETRY_ATTEMPTS,
        origin: str | None = None,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        super().__init__(crdts, origin, max_result_chars, call_timeout_s)
        self.client = client
        self.attempts = attempts

    async def execute(self, name: str, arguments: Any = None) -> Result:
        """Run one tool call; a JSON-serializable result, never an exception for
        an unknown tool, bad input or a refusal (ops are retried safely with an
        ``op_id`` on connection failures and 503). A call still running after
        :attr:`call_timeout_s` is stopped and answered with a ``timeout`` error."""
        limit = asyncio.timeout(self.call_timeout_s)
        try:
            async with limit:
                return await self._execute(name, arguments)
        except TimeoutError:
            if not limit.expired():
                raise
            return self._timed_out(name)

    async def _execute(self, name: str, arguments: Any) -> Result:
        try:
            tool = self.resolve(name)
            client = self.client
            if tool.action == "read":
                call = plan_read(tool, arguments)
                return self.value_result(tool, await client.fetch(tool.crdt_id), call)
            if tool.action == "history":
                ask = plan_history(arguments, tool)
                if ask.at is not None:
                    view = await client.at(tool.crdt_id, ask.at)
                    return self.value_result(tool, view, ask.read, ask.at)
                return self.history_value(
                    tool,
                    await client.history(
                        tool.crdt_id,
                        before=ask.before,
                        limit=ask.limit,
                        client_id=ask.client_id,
                        origin=ask.origin,
                    ),
                )
            if tool.action == "revert":
                undo = plan_revert(arguments)
                answer = await with_retries(
                    lambda key: client.revert(
                        tool.crdt_id,
                        client_id=undo.client_id,
                        origin=undo.origin,
                        since_seq=undo.since_seq,
                        until_seq=undo.until_seq,
                        op_id=key,
                    ),
                    op_id=new_op_id(),
                    attempts=self.attempts,
                )
                view = await client.fetch(tool.crdt_id)
                return revert_result(answer, self.value_result(tool, view))
            if tool.action == "restore":
                seq = plan_restore(arguments)
                await with_retries(
                    lambda key: client.restore(tool.crdt_id, seq, op_id=key),
                    op_id=new_op_id(),
                    attempts=self.attempts,
                )
                return self.value_result(tool, await client.fetch(tool.crdt_id))
            op = plan_op(tool, arguments)
            assert op is not None  # reads are answered above
            answer = await client.apply_retrying(
                tool.crdt_id, op, return_state=True, attempts=self.attempts, origin=self.origin
            )
            return self.value_result(tool, op_result(answer))
        except _InputError as exc:
            return _error(exc.code, exc.message)
        except ClientError as exc:
            return error_result(exc)


class SyncAgentTools(_ToolSet):
    """:class:`AgentTools` over the blocking :class:`Client`."""

    def __init__(
        self,
        client: Client,
        crdts: Iterable[tuple[str, str]],
        *,
        attempts: int = RETRY_ATTEMPTS,
        origin: str | None = None,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        super().__init__(crdts, origin, max_result_chars, call_timeout_s)
        self.client = client
        self.attempts = attempts

    def execute(self, name: str, arguments: Any = None) -> Result:
        """:meth:`AgentTools.execute`, blocking: a call still running after
        :attr:`call_timeout_s` (each request's timeout is cut to the time
        left, and no retry waits past it) is answered with a ``timeout`` error."""
        with self.client.deadline(self.call_timeout_s) as limit:
            try:
                return self._execute(name, arguments)
            except TimeoutError:
                if not limit.expired():
                    raise
                return self._timed_out(name)

    def _execute(self, name: str, arguments: Any) -> Result:
        try:
            tool = self.resolve(name)
            client = self.client
            if tool.action == "read":
                call = plan_read(tool, arguments)
                return self.value_result(tool, client.fetch(tool.crdt_id), call)
            if tool.action == "history":
                ask = plan_history(arguments, tool)
                if ask.at is not None:
                    view = client.at(tool.crdt_id, ask.at)
                    return self.value_result(tool, view, ask.read, ask.at)
                return self.history_value(
                    tool,
                    client.history(
                        tool.crdt_id,
                        before=ask.before,
                        limit=ask.limit,
                        client_id=ask.client_id,
                        origin=ask.origin,
                    ),
                )
            if tool.action == "revert":
                undo = plan_revert(arguments)
                answer = with_retries_sync(
                    lambda key: client.revert(
                        tool.crdt_id,
                        client_id=undo.client_id,
                        origin=undo.origin,
                        since_seq=undo.since_seq,
                        until_seq=undo.until_seq,
                        op_id=key,
                    ),
                    op_id=new_op_id(),
                    attempts=self.attempts,
                    deadline=current_deadline(),
                )
                view = client.fetch(tool.crdt_id)
                return revert_result(answer, self.value_result(tool, view))
            if tool.action == "restore":
                seq = plan_restore(arguments)
                with_retries_sync(
                    lambda key: client.restore(tool.crdt_id, seq, op_id=key),
                    op_id=new_op_id(),
                    attempts=self.attempts,
                    deadline=current_deadline(),
                )
                return self.value_result(tool, client.fetch(tool.crdt_id))
            op = plan_op(tool, arguments)
            assert op is not None  # reads are answered above
            answer = client.apply_retrying(
                tool.crdt_id, op, return_state=True, attempts=self.attempts, origin=self.origin
            )
            return self.value_result(tool, op_result(answer))
        except _InputError as exc:
            return _error(exc.code, exc.message)
        except ClientError as exc:
            return error_result(exc)
