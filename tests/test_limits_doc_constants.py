"""docs/limits.md names, for each fixed limit, the constant that holds it and
the file it is in: each one named is assigned in that file, so that changing
it there changes the limit (a copy elsewhere that nothing reads would not)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMITS = ROOT / "docs" / "limits.md"

NAMED_IN = re.compile(r"((?:`[A-Z][A-Z0-9_]*`(?:, | and )?)+) in `([^`]+\.py)`")
"""```A`, `B` in `syncd/x.py``` (or ```A` and `B` in ...``), after a ``fixed``."""


def documented() -> list[tuple[str, str]]:
    pairs = []
    for line in LIMITS.read_text().splitlines():
        if "fixed" not in line:
            continue
        for match in NAMED_IN.finditer(line[line.index("fixed") :]):
            for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", match.group(1)):
                pairs.append((name, match.group(2)))
    return pairs


def assigned_in(name: str, path: str) -> bool:
    text = (ROOT / path).read_text()
    return re.search(rf"^{name}(?::[^=\n]*)? *=", text, re.MULTILINE) is not None


def read_elsewhere_in_package(name: str, path: str) -> bool:
    """Whether the constant is read: in its own file after its assignment, or
    imported from it by another module of the package."""
    module = path.removesuffix(".py").replace("/", ".")
    own = (ROOT / path).read_text()
    if len(re.findall(rf"\b{name}\b", own)) > 1:
        return True
    importer = re.compile(rf"from {re.escape(module)} import [^\n]*\b{name}\b|\(\s*[^)]*\b{name}\b")
    package, _, leaf = module.rpartition(".")
    for other in (ROOT / "syncd").rglob("*.py"):
        text = other.read_text()
        if f"from {module} import" in text and importer.search(text):
            return True
        # The module imported whole (from syncd.crdt import ydoc_nesting), the
        # constant read through it.
        if f"from {package} import" in text and re.search(rf"\b{leaf}\.{name}\b", text):
            return True
    return False


def test_the_table_names_constants() -> None:
    pairs = documented()
    assert len(pairs) > 40, pairs  # the pattern still reads the table
    assert ("MAX_HEAD_BYTES", "syncd/http/parser.py") in pairs


def test_every_fixed_limit_is_assigned_in_the_file_the_docs_name() -> None:
    missing = [(name, path) for name, path in documented() if not assigned_in(name, path)]
    assert missing == []


def test_every_fixed_limit_the_docs_name_is_read() -> None:
    """A constant that nothing reads holds no limit: the limit is elsewhere."""
    unread = [
        (name, path) for name, path in documented() if not read_elsewhere_in_package(name, path)
    ]
    assert unread == []
