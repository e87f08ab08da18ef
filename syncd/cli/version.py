"""``syncd --version``: the version and the HTTP parser in use.

The parser is named because it is the one thing about a running syncd that
depends on the install (the ``fast`` extra) and on ``SERVICE_HTTP_PARSER``;
the text is only worked out when asked for, since finding the installed
parsers imports them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, get_args

from syncd import __version__


def version_text(env: Mapping[str, str]) -> str:
    from syncd.config import ParserChoice
    from syncd.http.parsers import available_parsers, resolve_parser_name

    choice = env.get("SERVICE_HTTP_PARSER") or "auto"
    choices = get_args(ParserChoice)
    if choice not in choices:
        # What serve refuses to start with: no parser's name at all, not a
        # parser missing from this install.
        parser = f"{choice!r} is not a parser ({', '.join(choices)})"
    else:
        try:
            parser = resolve_parser_name(choice)
        except ValueError:
            parser = f"{choice} (not installed)"
    return (
        f"syncd {__version__} (http parser: {parser}; available: {', '.join(available_parsers())})"
    )


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` for ``env`` on stdout and exit 0."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, env: Mapping[str, str], **kwargs: Any
    ) -> None:
        self.env = env
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="print the version and the HTTP parser in use, then exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> NoReturn:
        sys.stdout.write(version_text(self.env) + "\n")
        parser.exit()
