"""The JSON body rules: the nesting bound agrees with the document's real depth."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.errors import ApiError
from syncd.http.request import _depth_exceeds, parse_json

# Strings full of what could fool a bracket counter: brackets, quotes, escapes.
TRICKY_TEXT = st.text(alphabet='[]{}"\\\\u0041 ab\n\t', max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=60,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(value=JSON_VALUES, limit=st.integers(min_value=0, max_value=8), ascii_only=st.booleans())
def test_depth_check_matches_the_real_depth(value: Any, limit: int, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert _depth_exceeds(raw, limit) == (depth(value) > limit)


def test_deep_documents_refused_shallow_wide_ones_parsed() -> None:
    with pytest.raises(ApiError) as refused:
        parse_json(b"[" * 65 + b"]" * 65)
    assert refused.value.status == 400 and "deeper than 64" in refused.value.message
    # more brackets than the bound, none deeper than 2: parsed
    wide = json.dumps([{"op": "increment", "note": "[[[{{{"}] * 100).encode()
    assert len(parse_json(wide)) == 100
    # brackets hidden in strings do not count; escaped quotes do not end a string
    assert parse_json(json.dumps(['\\"' + "[" * 100]).encode()) == ['\\"' + "[" * 100]


def reference(raw: bytes) -> tuple[str, Any]:
    """What json's own decoder makes of ``raw`` with our rules (no NaN), or its message."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        value = json.JSONDecoder(parse_constant=refuse).decode(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return "error", f"malformed JSON: {exc}"
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate escape: no UTF-8 string (packing it for the log failed).
        return "error", "malformed JSON: a string holds an unpaired surrogate (\\ud800-\\udfff)"
    return "ok", value


def ours(raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", parse_json(raw)
    except ApiError as exc:
        return "error", exc.message


@pytest.mark.parametrize(
    "raw",
    [
        b'{"op":"increment","amount":1}',
        b'[{"op":"increment"},{"op":"increment"}]',
        b' {"op":"increment"} ',
        b'{"op":"increment"}\n',
        b'{"op":"increment"} x',
        b'{"op":"increment"}{}',
        b'{"op":"increment"',
        b'{"a":NaN}',
        b"[Infinity]",
        b'{"a":1,}',
        b"[]",
        b"{}",
        b'"text"',
        b"12",
        b"null",
        b"[1] ]",
        b'{"\xff":1}',
        b'{"a":"\\ud800"}',
        b'{"\\udc00":1}',
        b'["\\ud83d\\ude00", "\\\\ud800"]',
    ],
)
def test_a_body_parses_as_json_s_decoder_parses_it_with_its_messages(raw: bytes) -> None:
    """The scanner-first decode (syncd/http/request.py) changes nothing: the
    same values, and every error with the decoder's own message."""
    assert ours(raw) == reference(raw)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, tail=st.sampled_from(["", " ", "\n", "x", "]", "}", "{}"]))
def test_documents_and_what_follows_them_parse_as_json_s_decoder_parses_them(
    value: Any, tail: str
) -> None:
    raw = (json.dumps(value) + tail).encode()
    if len(raw) <= 64 or depth(value) <= 64:
        assert ours(raw) == reference(raw)
