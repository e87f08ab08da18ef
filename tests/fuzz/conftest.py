"""Fixtures of the fuzzers: one real server per HTTP parser for the whole module.

The server runs on its own thread (see ``support.ThreadedServer``) so that
Hypothesis can drive plain functions; a ``LogWatch`` is installed before it
starts and sees everything it logs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from syncd.auth.permissions import Rule, V1Permissions, V2Permissions
from syncd.auth.tokens import Claims, SigningKey, sign_claims
from tests.conftest import SIGNING_KEY_HEX
from tests.fuzz.support import LogWatch, ThreadedServer, fuzz_settings

KEY = SigningKey(bytes.fromhex(SIGNING_KEY_HEX))
HOUR_MS = 3_600_000


def mint(
    ns: str = "app", client_id: int = 7, permissions: object = None, ttl_ms: int = HOUR_MS
) -> str:
    perms = permissions or V1Permissions(read=("*",), write=("*",))
    expires = time.time_ns() // 1_000_000 + ttl_ms
    return sign_claims(Claims(ns, client_id, expires, perms), KEY)  # type: ignore[arg-type]


def sample_tokens() -> list[str]:
    """Valid tokens of every shape, the seeds of the token mutations."""
    return [
        mint(),
        mint(client_id=0),
        mint(permissions=V1Permissions(read=("gc:*",), write=(), admin=True)),
        mint(permissions=V2Permissions(read=(Rule("*"),), write=(Rule("gc:*", 1),), rate_limit=50)),
        mint(
            permissions=V2Permissions(
                read=(Rule("u:{clientId}:*", None, 1),), write=(Rule("{clientId}"),)
            )
        ),
        mint(ns="other"),
    ]


@dataclass
class FuzzTarget:
    server: ThreadedServer
    logs: LogWatch
    parser: str
    token: str

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture(scope="module", params=["h11", "httptools"])
def fuzz_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FuzzTarget]:
    parser = str(request.param)
    watch = LogWatch()
    with watch.installed():
        server = ThreadedServer(fuzz_settings(tmp_path_factory.mktemp("fuzz"), parser)).start()
        try:
            yield FuzzTarget(server, watch, parser, mint())
        finally:
            server.stop()
