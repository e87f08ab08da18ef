"""``syncd keygen``: print a new ``SERVICE_SIGNING_KEY``.

A key made here rather than by hand is 32 bytes from the operating system's
random source, the ed25519 seed the service expects, written the way the
setting takes it (64 hex characters).
"""

from __future__ import annotations

import argparse
import secrets
from collections.abc import Mapping

from syncd.cli.command import Commands, add_command


def register(commands: Commands) -> None:
    add_command(
        commands,
        "keygen",
        run,
        help="print a new SERVICE_SIGNING_KEY (64 hex characters)",
        description="Print a new random signing key (an ed25519 seed) for SERVICE_SIGNING_KEY.",
    )


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    print(secrets.token_bytes(32).hex())
    return 0
