"""The compiled glob matcher agrees with a plain reference matcher."""

from __future__ import annotations

import os
import time
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncd.auth.globs import GlobSet, compile_glob

EXAMPLES = int(os.environ.get("AUTH_HYPOTHESIS_EXAMPLES", "200"))


def reference_match(pattern: str, s: str) -> bool:
    """Textbook recursion: ``*`` eats zero or more characters, the rest is literal."""

    @cache
    def m(i: int, j: int) -> bool:
        if i == len(pattern):
            return j == len(s)
        if pattern[i] == "*":
            return m(i + 1, j) or (j < len(s) and m(i, j + 1))
        return j < len(s) and pattern[i] == s[j] and m(i + 1, j + 1)

    return m(0, 0)


# A small alphabet makes overlaps and near-misses common; regex metacharacters
# check that nothing is interpreted.
patterns = st.text(alphabet="ab*:.?[-", max_size=12)
ids = st.text(alphabet="ab:.?[-", max_size=14)


@settings(max_examples=EXAMPLES, deadline=None)
@given(pattern=patterns, s=ids)
def test_compiled_agrees_with_reference(pattern: str, s: str) -> None:
    assert compile_glob(pattern)(s) == reference_match(pattern, s)


@settings(max_examples=EXAMPLES, deadline=None)
@given(pattern=patterns, s=ids)
def test_pattern_matches_the_ids_built_from_it(pattern: str, s: str) -> None:
    # Replacing each star by any text always gives a matching id.
    built = s.join(pattern.split("*"))
    assert compile_glob(pattern)(built)
    assert reference_match(pattern, built)


@settings(max_examples=EXAMPLES, deadline=None)
@given(pats=st.lists(patterns, max_size=5), s=ids)
def test_globset_is_any_of(pats: list[str], s: str) -> None:
    assert GlobSet(pats).matches(s) == any(reference_match(p, s) for p in pats)


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["", "gc:a", "anything"], []),
        ("**", ["", "x"], []),
        ("gc:*", ["gc:", "gc:a"], ["gc", "xgc:a", "pn:a"]),
        ("or:cart-42", ["or:cart-42"], ["or:cart-420", "or:cart-4", "Or:cart-42"]),
        ("or:cart-*", ["or:cart-", "or:cart-42"], ["or:cart", "or:carts"]),
        ("*-42", ["or:cart-42", "-42"], ["or:cart-420"]),
        ("*cart*", ["cart", "or:cart-1"], ["car"]),
        ("a*b*c", ["abc", "aXbYc", "abbc", "acbc"], ["ab", "acb", "bac"]),
        ("ab*ba", ["aba" + "ba", "abba"], ["aba"]),
        ("a.c", ["a.c"], ["abc"]),
        ("a?", ["a?"], ["ab"]),
        ("[a]*", ["[a]x"], ["ax"]),
    ],
)
def test_table(pattern: str, yes: list[str], no: list[str]) -> None:
    m = compile_glob(pattern)
    for s in yes:
        assert m(s), s
        assert GlobSet([pattern]).matches(s), s
    for s in no:
        assert not m(s), s
        assert not GlobSet([pattern]).matches(s), s


def test_no_catastrophic_backtracking() -> None:
    pattern = "*a" * 12 + "*b"
    s = "a" * 256
    start = time.perf_counter()
    assert not compile_glob(pattern)(s)
    # Backtracking would take minutes; the bound leaves room for a busy machine.
    assert time.perf_counter() - start < 0.5


def test_empty_globset_matches_nothing() -> None:
    assert not GlobSet([]).matches("")
    assert not GlobSet([]).matches("gc:a")
