"""The clients share one TLS context (``syncd.client._http.default_tls``):
made once per process, it still verifies the server's certificate, and it
still trusts what ``SSL_CERT_FILE`` names, as httpx's own default does."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from syncd.client import AsyncClient, Client
from syncd.client._http import default_tls
from syncd.client.errors import TransportError
from tests.client.conftest import NS, make_token
from tests.pki import Pki, client_context, make_pki, start_tls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def https_url(spawn_server: Any, pki: Pki) -> str:
    cert, key = pki.issue("server")
    server = start_tls(spawn_server, cert, key, client_context(pki))
    return f"https://localhost:{server.port}"


def test_every_client_of_a_process_shares_one_context() -> None:
    assert default_tls() is default_tls()


async def test_a_server_whose_ca_is_not_trusted_is_refused(https_url: str) -> None:
    """The shared context verifies: the test CA is in no bundle this process
    trusts, so both clients fail the handshake before any request."""
    refused = "CERTIFICATE_VERIFY_FAILED"
    with (
        Client(https_url, make_token(), NS) as client,
        pytest.raises(TransportError, match=refused),
    ):
        client.read("gc:hits")
    async with AsyncClient(https_url, make_token(), NS) as aclient:
        with pytest.raises(TransportError, match=refused):
            await aclient.read("gc:hits")


def test_a_ca_named_by_ssl_cert_file_is_trusted(https_url: str, pki: Pki) -> None:
    """``SSL_CERT_FILE`` as a process is started with it: both clients reach
    the server, and the second reads what both wrote."""
    code = (
        "import asyncio, sys\n"
        "from syncd.client import AsyncClient, Client\n"
        "url, token, ns = sys.argv[1:]\n"
        "with Client(url, token, ns) as c:\n"
        "    c.gcounter_increment('gc:hits')\n"
        "async def main():\n"
        "    async with AsyncClient(url, token, ns) as c:\n"
        "        await c.gcounter_increment('gc:hits')\n"
        "        print((await c.read('gc:hits'))['value'])\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, https_url, make_token(), NS],
        env={**os.environ, "SSL_CERT_FILE": str(pki.ca)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]
