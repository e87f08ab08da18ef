"""Permission globs compiled to fast matchers.

The only wildcard is ``*`` (any run of characters, including none); every other
character is literal (docs/permissions.md#globs). A glob is checked on every authorized
request, so each is compiled once into the cheapest test that decides it: an
equality, a ``startswith``/``endswith``, or a left-to-right ``str.find`` over
the literal pieces. No regular expressions: a pattern such as ``*a*a*a*a*b``
makes a backtracking regex engine take time polynomial of high degree in the id
length, while the greedy piece search below is linear in the pieces and the id
(leftmost placement of each piece is always optimal when the only wildcard is
``*``, so it never needs to backtrack).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

Matcher = Callable[[str], bool]

COMPILED_GLOB_CACHE_SIZE = 4096
"""Distinct patterns whose compiled matcher is kept. Tokens share patterns
(``or:cart-*``), and V2 patterns with ``{clientId}`` differ per client, so the
cache is bounded rather than growing with the number of clients."""


def _everything(_: str) -> bool:
    return True


def _pieces_matcher(pieces: list[str]) -> Matcher:
    head = pieces[0]
    tail = pieces[-1]
    middle = tuple(p for p in pieces[1:-1] if p)
    min_len = len(head) + len(tail) + sum(len(p) for p in middle)
    head_len = len(head)
    tail_len = len(tail)

    def match(s: str) -> bool:
        if len(s) < min_len or not s.startswith(head) or not s.endswith(tail):
            return False
        pos = head_len
        end = len(s) - tail_len
        for piece in middle:
            i = s.find(piece, pos, end)
            if i < 0:
                return False
            pos = i + len(piece)
        return True

    return match


@lru_cache(maxsize=COMPILED_GLOB_CACHE_SIZE)
def compile_glob(pattern: str) -> Matcher:
    """A function telling whether a string matches ``pattern``."""
    if "*" not in pattern:
        return pattern.__eq__
    pieces = pattern.split("*")
    if all(not p for p in pieces):
        return _everything
    nonempty = [p for p in pieces if p]
    if len(nonempty) == 1:
        (literal,) = nonempty
        starts = pieces[0] != ""
        ends = pieces[-1] != ""
        if starts and not ends:
            return lambda s: s.startswith(literal)
        if ends and not starts:
            return lambda s: s.endswith(literal)
        if not starts and not ends:
            return lambda s: literal in s
    return _pieces_matcher(pieces)


class GlobSet:
    """Any-of matching over a list of globs (V1 read or write lists).

    Exact names go into one set and plain prefixes into one tuple, so the common
    shapes (``or:cart-42``, ``gc:*``) cost one hash lookup and one C-level
    ``startswith`` however many of them the list holds.
    """

    __slots__ = ("_everything", "_exact", "_others", "_prefixes", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        exact: set[str] = set()
        prefixes: list[str] = []
        others: list[Matcher] = []
        everything = False
        for p in self.patterns:
            stars = p.count("*")
            if stars == 0:
                exact.add(p)
            elif p.strip("*") == "":
                everything = True
            elif stars == 1 and p.endswith("*"):
                prefixes.append(p[:-1])
            else:
                others.append(compile_glob(p))
        self._everything = everything
        self._exact = frozenset(exact)
        self._prefixes = tuple(prefixes)
        self._others = tuple(others)

    def matches(self, s: str) -> bool:
        if self._everything or s in self._exact:
            return True
        if self._prefixes and s.startswith(self._prefixes):
            return True
        return any(m(s) for m in self._others)

    def __bool__(self) -> bool:
        return bool(self.patterns)
