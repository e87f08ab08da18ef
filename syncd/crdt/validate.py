"""Op-field checks shared by the CRDT types.

Every check raises :func:`syncd.errors.invalid_op` with a message that starts
with the field's name, so a client can tell which part of its op was refused.
Nothing here mutates anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from syncd.errors import ApiError, invalid_op

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON client (JavaScript included) holds exactly."""

MAX_AMOUNT = MAX_SAFE_INTEGER
"""Counter amounts (docs/data-model.md#gcounter): 1 … 2^53-1."""

MAX_ELEMENT_BYTES = 64 * 1024
"""Set elements and presence data, as canonical JSON in UTF-8 (docs/data-model.md#orset)."""

MAX_JSON_DEPTH = 64
"""Nesting limit of stored JSON values. Deeper values could not be encoded or
decoded again within the interpreter's recursion limit on every replica (a tree
view nests node maps on top of node data)."""

MIN_WIRE_INT = -(2**63)
MAX_WIRE_INT = 2**64 - 1
"""Integers inside stored values must fit msgpack's 64-bit integers, since every
state and delta travels as msgpack."""

_SCALARS = (str, bool, type(None))

COMMON_FIELDS = frozenset({"op", "type", "op_id", "client_id", "origin"})
"""The fields any op may carry (docs/data-model.md#ops); each type's ops add
their own (:func:`op_fields`). Any other field is refused, so a misspelt
field (``amout``) is an error and not a default."""

ORIGIN_MAX_LEN = 128
"""Characters in an op's ``origin`` (docs/data-model.md#origins): room for a
task name such as ``agent:summarize-42`` with an id, short enough that the
history it is kept in stays small."""


def op_fields(*names: str) -> frozenset[str]:
    """The fields an op accepts: :data:`COMMON_FIELDS` and ``names``."""
    return COMMON_FIELDS.union(names)


def check_fields(op: Mapping[str, Any], allowed: frozenset[str]) -> None:
    """400 ``invalid_op`` naming a field of ``op`` that ``allowed`` lacks.

    The test is one subset check over the op's keys, done in C (about 60 ns
    for a small op); only a refused op pays for finding the name."""
    if allowed.issuperset(op):
        return
    unknown = sorted(str(key) for key in op.keys() - allowed)
    own = ", ".join(sorted(allowed - COMMON_FIELDS)) or "no field of its own"
    raise invalid_op(
        f"{unknown[0]}: unknown field; {op.get('op')} takes {own} "
        f"besides {', '.join(sorted(COMMON_FIELDS))}"
    )


_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
"""Canonical JSON of values without floats, in C. One encoder made once: ``json.dumps``
with options builds a new one on every call, which cost more than the encoding."""

_SAFE_FLOAT = float(2**53)
"""Integral floats below this in magnitude are written as their exact integer, which
is what ECMAScript writes; from here on ECMAScript keeps only the shortest digits
that read back as the same float (2^60 is ``1152921504606847000``)."""


def es_number(value: float) -> str:
    """A float as ECMAScript's ``Number.prototype.toString`` writes it, which is
    how RFC 8785 (JCS) writes numbers: ``1.0`` is ``1``, ``-0.0`` is ``0``,
    ``1e-07`` is ``1e-7``, ``1e+16`` is ``10000000000000000``, ``1e+21`` stays.

    Python's ``repr`` picks the same digits ECMAScript does (the shortest that
    read back as the same float, the closest of those); only the layout differs.
    """
    if value.is_integer() and -_SAFE_FLOAT < value < _SAFE_FLOAT:
        return str(int(value))
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    if whole == "0":  # 0.00123: no exponent, the leading zeros place the point
        digits = fraction.lstrip("0")
        point = len(digits) - len(fraction)
    else:
        digits = whole + fraction
        point = len(whole) + (int(exp) if exp else 0)
    # value = 0.<digits> * 10^point, digits without trailing zeros (ECMA-262
    # Number::toString's k digits and n = point).
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -6 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    exponent = point - 1
    mark = "+" if exponent >= 0 else "-"
    head = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{head}e{mark}{abs(exponent)}"


def _holds_float(value: dict[str, Any] | list[Any]) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        items = item.values() if type(item) is dict else item
        # The items' types are gathered in C: a Python loop over the items
        # cost about as much as encoding them.
        kinds = set(map(type, items))
        if float in kinds:
            return True
        if dict in kinds or list in kinds:
            stack.extend(sub for sub in items if type(sub) is dict or type(sub) is list)
    return False


def _with_es_numbers(value: Any) -> str:
    """Canonical JSON of a value that holds floats (the slow path)."""
    kind = type(value)
    if kind is float:
        return es_number(value)
    if kind is dict:
        for key in value:
            if type(key) is not str:
                raise TypeError(f"keys must be str, not {type(key).__name__}")
        return (
            "{"
            + ",".join(f"{_encode(key)}:{_with_es_numbers(value[key])}" for key in sorted(value))
            + "}"
        )
    if kind is list:
        return "[" + ",".join(map(_with_es_numbers, value)) + "]"
    return _encode(value)


def canonical_json(value: Any) -> str:
    """The identity of a JSON value: sorted keys (by code point), no spaces, raw
    UTF-8 characters, and numbers as ECMAScript writes them (:func:`es_number`),
    so a JavaScript client, which reads ``1.0`` as ``1``, computes the same text.
    Integers stay exact: beyond 2^53 a JavaScript client cannot tell them apart.

    Values without floats (most) are encoded in C, and that text is the answer
    unless it holds a ``.``, ``e+`` or ``e-`` (every float's text has one; a
    fast substring scan): only then are the items walked for a float."""
    kind = type(value)
    if kind is dict or kind is list:
        text = _encode(value)
        if ("." in text or "e+" in text or "e-" in text) and _holds_float(value):
            return _with_es_numbers(value)
        return text
    if kind is float:
        return es_number(value)
    return _plain_json(value)


def shown_json(value: Any) -> str:
    """The JSON text a read shows for ``value``, keys sorted: floats as Python
    writes them, so ``1.0``, ``1`` and ``true`` all differ. Not an identity
    (:func:`canonical_json` is): what a restore compares, to bring back the very
    value the target had."""
    return _encode(value)


def _plain_json(value: Any) -> str:
    """Canonical JSON of a value known to hold no float."""
    if type(value) is int:
        # As the encoder writes it, without the encoder's set-up for one number.
        return int.__repr__(value)
    return _encode(value)


def check_json(value: Any, field: str, *, level: int = 1) -> bool:
    """Refuse anything that is not plain JSON that both JSON and msgpack carry;
    True when ``value`` holds a float (:func:`json_value` then knows which
    encoding it needs without another walk).

    ``level`` is the nesting level ``value`` itself counts as: 0 for an array
    of values that is the op's field and not a value (an rga's ``values``),
    so that each of its values may nest :data:`MAX_JSON_DEPTH` levels as a
    set element or a register value may.

    msgpack input can hold bytes, integer map keys or huge integers that JSON
    input cannot; those are refused here rather than failing later in an encoder.
    """
    floats = False
    stack: list[tuple[Any, int]] = [(value, level)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is int:
            if not MIN_WIRE_INT <= item <= MAX_WIRE_INT:
                raise invalid_op(f"{field}: integer out of the 64-bit range")
            continue
        if kind is float:
            if not math.isfinite(item):
                raise invalid_op(f"{field}: numbers must be finite")
            floats = True
            continue
        if depth > MAX_JSON_DEPTH:
            raise invalid_op(f"{field}: nested deeper than {MAX_JSON_DEPTH} levels")
        if kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    raise invalid_op(f"{field}: object keys must be strings")
                if type(sub) not in _SCALARS:
                    stack.append((sub, depth + 1))
        elif kind is list:
            for sub in item:
                if type(sub) not in _SCALARS:
                    stack.append((sub, depth + 1))
        else:
            raise invalid_op(f"{field}: not a JSON value")
    return floats


def json_value(value: Any, field: str, max_bytes: int | None = None) -> str:
    """Check ``value`` as plain JSON and return its canonical JSON text.

    With ``max_bytes`` the canonical UTF-8 encoding must not exceed it.
    """
    floats = check_json(value, field)
    try:
        text = _with_es_numbers(value) if floats else _plain_json(value)
        size = len(text.encode("utf-8"))
    except (ValueError, UnicodeEncodeError) as exc:
        # Lone surrogates from JSON \ud800 escapes cannot be encoded as UTF-8.
        raise invalid_op(f"{field}: not encodable as UTF-8 JSON") from exc
    if max_bytes is not None and size > max_bytes:
        raise invalid_op(f"{field}: larger than {max_bytes} bytes as canonical JSON")
    return text


def json_object(value: Any, field: str, max_bytes: int | None = None) -> str:
    """Like :func:`json_value`, for a field that must be a JSON object."""
    if type(value) is not dict:
        raise invalid_op(f"{field}: must be a JSON object")
    return json_value(value, field, max_bytes)


def json_int(value: Any) -> int | None:
    """A JSON integer as an int: ``2``, or ``2.0`` (JSON Schema's ``integer``
    admits it, and JSON parsers give a float), within 2^53-1 either way;
    None for anything else (bool, other numbers, strings). Request bodies
    other than ops take integers through this; ops take only ints."""
    kind = type(value)
    if kind is int:
        return value  # type: ignore[no-any-return]
    if kind is float and value.is_integer() and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return int(value)
    return None


def int_field(op: Mapping[str, Any], field: str, low: int, high: int, default: int | None) -> int:
    """An integer field in ``[low, high]``; ``default`` when absent (None: required).
    An optional field sent as ``null`` is of the wrong type, not missing."""
    value = op.get(field, default)
    if value is None and default is None:
        raise invalid_op(f"{field}: required")
    # bool is an int subclass in Python but never a number in JSON.
    if type(value) is not int or not low <= value <= high:
        raise invalid_op(f"{field}: must be an integer from {low} to {high}")
    return value


def amount_field(op: Mapping[str, Any]) -> int:
    """The counter ``amount``: an integer 1 … 2^53-1, default 1 (the hot path)."""
    amount = op.get("amount", 1)
    if type(amount) is not int or not 1 <= amount <= MAX_AMOUNT:
        raise invalid_op(f"amount: must be an integer from 1 to {MAX_AMOUNT}")
    return amount


def str_field(
    op: Mapping[str, Any], field: str, max_len: int, *, required: bool = True
) -> str | None:
    """A string field of 1 … ``max_len`` characters (None when optional and absent)."""
    value = op.get(field)
    if value is None:
        if required:
            raise invalid_op(f"{field}: required")
        return None
    if type(value) is not str or not 1 <= len(value) <= max_len:
        raise invalid_op(f"{field}: must be a string of 1 to {max_len} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid_op(f"{field}: not encodable as UTF-8") from exc
    return value


def check_origin(
    value: Any, field: str = "origin", error: Callable[[str], ApiError] = invalid_op
) -> str:
    """An ``origin`` (an op's, a batch's or a connection's): a string of 1 to
    :data:`ORIGIN_MAX_LEN` characters, encodable as UTF-8; else ``error``
    (400 ``invalid_op`` in an op, ``bad_request`` in a query or body)."""
    if type(value) is not str or not 1 <= len(value) <= ORIGIN_MAX_LEN:
        raise error(f"{field}: must be a string of 1 to {ORIGIN_MAX_LEN} characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise error(f"{field}: not encodable as UTF-8") from None
    return value


def with_origin(body: Any, origin: str) -> Any:
    """``body`` (an op or an array of ops) with ``origin`` on every op that
    names none of its own: how a batch's origin (``?origin=``, a WebSocket
    message's ``origin``) reaches its ops. Anything else is left for the
    engine to refuse."""
    if type(body) is dict:
        return body if body.get("origin") is not None else {**body, "origin": origin}
    if type(body) is list:
        return [
            {**op, "origin": origin} if type(op) is dict and op.get("origin") is None else op
            for op in body
        ]
    return body


def op_name(op: Mapping[str, Any], ops: Mapping[str, int], type_name: str) -> str:
    """The op's ``op`` field, which must name one of the type's ops."""
    name = op.get("op")
    if type(name) is not str or name not in ops:
        raise invalid_op(f"op: must be one of {', '.join(sorted(ops))} for {type_name}")
    return name


def required(op: Mapping[str, Any], field: str) -> Any:
    """A field that must be present (JSON null counts as present)."""
    if field not in op:
        raise invalid_op(f"{field}: required")
    return op[field]


__all__ = [
    "COMMON_FIELDS",
    "MAX_AMOUNT",
    "MAX_ELEMENT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_SAFE_INTEGER",
    "ORIGIN_MAX_LEN",
    "amount_field",
    "canonical_json",
    "check_fields",
    "check_json",
    "check_origin",
    "es_number",
    "int_field",
    "json_int",
    "json_object",
    "json_value",
    "op_fields",
    "op_name",
    "required",
    "shown_json",
    "str_field",
    "with_origin",
]
