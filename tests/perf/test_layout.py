"""perf/ stays laid out by role, and every perf command or path the project names exists.

perf/ holds folders, one per role (lib, suite, bench, studies, peers, tools,
profiles), and nothing else but the entry point and the reports: a script
added beside them would make it flat again. Every ``python -m perf...``
module and every ``perf/...`` path named in the documentation, the Makefile,
the scripts or a source comment must still be there, so that moving a
benchmark without updating who names it fails here rather than in a reader's
shell.

The profiles recorded under perf/profiles/ (every ``.md`` there but its
README) are left out: they are the output of a past run, and their stack
frames name the files as they were when it ran.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "perf"

ROLES = frozenset({"lib", "suite", "bench", "studies", "peers", "tools", "profiles"})
TOP_FILES = frozenset({"__init__.py", "__main__.py", "README.md", "RESULTS.md"})
IGNORED = frozenset({"__pycache__", "out"})
"""Not part of the layout: bytecode, and perf/out/ (profiles written there, ignored by git)."""

SCANNED = ("README.md", "Makefile", "docs", "perf", "syncd", "tests", "scripts", "systemd")
SUFFIXES = frozenset({".py", ".md", ".sh", ".mjs", ".toml", ".service", ".env", ".yaml", ".yml"})
SKIPPED_PARTS = frozenset({"node_modules", "__pycache__", "data"})

MODULE = re.compile(r"(?<![\w./-])perf(?:\.\w+)+")
PATH = re.compile(r"(?<![\w./-])perf/[\w./-]*")
GENERATED = ("perf/out",)
"""Paths the tools write to; named before they exist."""


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            relative = path.relative_to(ROOT)
            if SKIPPED_PARTS.intersection(relative.parts) or not path.is_file():
                continue
            if path.suffix not in SUFFIXES and path.name != "Makefile":
                continue
            if relative.parts[:2] == ("perf", "profiles") and path.name != "README.md":
                continue
            files.append(path)
    return files


def module_exists(dotted: str) -> bool:
    """Each part a module of the package before it, up to the first plain module
    (what follows that is an attribute: ``perf.lib.servers.ROOT``)."""
    parts = dotted.split(".")
    for n in range(1, len(parts) + 1):
        spec = importlib.util.find_spec(".".join(parts[:n]))
        if spec is None:
            return False
        if spec.submodule_search_locations is None:
            return True
    return True


def test_perf_is_laid_out_by_role() -> None:
    entries = {p.name for p in PERF.iterdir()} - IGNORED
    assert entries - TOP_FILES == ROLES, "perf/ holds only its role folders and " + ", ".join(
        sorted(TOP_FILES)
    )
    for role in ROLES - {"profiles"}:
        assert (PERF / role / "__init__.py").is_file(), f"perf/{role}/ is not a package"
        assert (PERF / role / "__init__.py").read_text().startswith('"""'), (
            f"perf/{role}/__init__.py says nothing of what the folder holds"
        )


def test_every_perf_module_and_path_named_exists() -> None:
    missing: list[str] = []
    for path in scanned_files():
        text = path.read_text(errors="replace")
        # "python -m\nperf.x" in wrapped prose is one command
        for match in MODULE.finditer(text):
            dotted = match.group(0).rstrip(".")
            if not module_exists(dotted):
                missing.append(f"{path.relative_to(ROOT)}: module {dotted}")
        for match in PATH.finditer(text):
            named = match.group(0).rstrip(".")
            if named.startswith(GENERATED) or (ROOT / named).exists():
                continue
            missing.append(f"{path.relative_to(ROOT)}: path {named}")
    assert not missing, "\n".join(sorted(set(missing)))


def test_the_scan_sees_the_documented_commands() -> None:
    """The scan is not vacuous: the commands the docs give are among what it checks."""
    texts = "\n".join(p.read_text(errors="replace") for p in scanned_files())
    named = {m.group(0).rstrip(".") for m in MODULE.finditer(texts)}
    assert {"perf.bench.http_ops", "perf.tools.profile", "perf.studies.yjs"} <= named
    assert "perf/lib/slowloris.py" in {m.group(0) for m in PATH.finditer(texts)}
