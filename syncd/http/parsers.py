"""Which HTTP parser runs: h11 (always installed) or httptools (the ``fast``
extra), behind the interface of ``syncd.http.parser``."""

from __future__ import annotations

from syncd.http.h11_parser import H11Parser
from syncd.http.parser import HttpParser


def available_parsers() -> list[str]:
    names = ["h11"]
    try:
        import httptools  # noqa: F401
    except ImportError:
        pass
    else:
        names.append("httptools")
    return names


def resolve_parser_name(choice: str) -> str:
    """``auto`` picks httptools when importable; an explicit choice must be available."""
    available = available_parsers()
    if choice == "auto":
        return "httptools" if "httptools" in available else "h11"
    if choice not in available:
        raise ValueError(f"HTTP parser {choice!r} is not installed (pip install 'syncd[fast]')")
    return choice


def make_parser(name: str, max_body: int) -> HttpParser:
    if name == "httptools":
        # Imported on demand: httptools is an optional extra.
        from syncd.http.httptools_parser import HttptoolsParser

        return HttptoolsParser(max_body)
    return H11Parser(max_body)
