from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from syncd.metrics import Metrics
from tests.webhooks.webhook_receiver import Certs, Receiver


@pytest.fixture
async def make_receiver() -> AsyncIterator[Callable[..., Awaitable[Receiver]]]:
    made: list[Receiver] = []

    async def make(**kwargs: Any) -> Receiver:
        r = await Receiver(**kwargs).start()
        made.append(r)
        return r

    yield make
    for r in made:
        await r.close()


@pytest.fixture
def dead_url() -> str:
    """A URL whose port was just bound and released: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A self-signed certificate made now (no `cryptography` in the venv: openssl)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    return Certs(cert=cert, key=key)
