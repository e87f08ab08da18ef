"""The repository stands on its own: no pointer to a document outside it, and
every link between its documents (and every ``docs/<file>.md#anchor`` a source
comment cites) lands on a file and a heading that exist.

Anchors are computed the way GitHub renders them, since that is where readers
follow these links: the heading text lower-cased, punctuation dropped, spaces
turned into hyphens, and ``-1``, ``-2`` … appended to repeated headings.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCANNED_DIRS = ("syncd", "docs", "clients")
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})
TEXT_SUFFIXES = frozenset({".py", ".md", ".js", ".ts", ".json", ".html", ".css", ".toml", ".txt"})

# Built from pieces so that this file does not trip its own scan.
FORBIDDEN = ("SPEC" + " section", "SPEC" + ".md", "../" + "shared")

MARKDOWN_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DOCS_REFERENCE = re.compile(r"(?<![\w./-])docs/([\w.-]+\.md)(?:#([\w-]+))?")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                continue
            if path.is_file() and path.suffix in TEXT_SUFFIXES:
                files.append(path)
    return files


def markdown_files() -> list[Path]:
    return [path for path in scanned_files() if path.suffix == ".md"]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def github_anchor(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and underscores
    return text.replace(" ", "-")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match is not None:
            marker = match.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            continue
        if fence is None:
            lines.append((number, line))
    return lines


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = ATX_HEADING.match(line)
        if match is None:
            continue
        base = github_anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def check_target(source: Path, target: Path, anchor: str | None) -> str | None:
    """What is wrong with a link from ``source`` to ``target#anchor``, or None."""
    if not target.exists():
        return f"{rel(source)}: links to {os.path.relpath(target, ROOT)}, which does not exist"
    if anchor:
        if target.suffix != ".md":
            return f"{rel(source)}: an anchor #{anchor} into {rel(target)}, which is not markdown"
        if anchor not in anchors(target):
            return f"{rel(source)}: {rel(target)} has no heading with the anchor #{anchor}"
    return None


def test_the_anchor_rule_matches_github() -> None:
    assert github_anchor("`state`, per type") == "state-per-type"
    assert github_anchor('"Only my own keys"') == "only-my-own-keys"
    assert github_anchor("V1: glob lists") == "v1-glob-lists"
    assert github_anchor("1. Run it") == "1-run-it"
    assert github_anchor("SERVICE_FSYNC and [links](x.md)") == "service_fsync-and-links"


def test_headings_in_code_blocks_are_not_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n```sh\n# a comment\n```\n\n## Part\n\n## Part\n", encoding="utf-8")
    assert anchors(page) == {"title", "part", "part-1"}


def test_no_file_points_outside_the_repository() -> None:
    offenders = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            offenders.extend(
                f"{rel(path)}:{number}: {line.strip()}" for word in FORBIDDEN if word in line
            )
    assert not offenders, "references to documents outside the repository:\n" + "\n".join(offenders)


@pytest.mark.parametrize("page", markdown_files(), ids=rel)
def test_markdown_links_land(page: Path) -> None:
    problems = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in MARKDOWN_LINK.finditer(line):
            link = match.group(1)
            if EXTERNAL.match(link):
                continue
            path_part, _, anchor = link.partition("#")
            target = (page.parent / path_part).resolve() if path_part else page
            problem = check_target(page, target, anchor or None)
            if problem is not None:
                problems.append(f"line {number}: {problem}")
    assert not problems, "\n".join(problems)


def test_docs_references_in_sources_land() -> None:
    problems = []
    cited = 0
    for path in scanned_files():
        if path.suffix == ".md":
            continue  # markdown links are checked above, relative to their page
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in DOCS_REFERENCE.finditer(line):
                cited += 1
                problem = check_target(path, ROOT / "docs" / match.group(1), match.group(2))
                if problem is not None:
                    problems.append(f"line {number}: {problem}")
    assert not problems, "\n".join(problems)
    assert cited, "no source cites docs/<file>.md: the pattern no longer matches anything"
