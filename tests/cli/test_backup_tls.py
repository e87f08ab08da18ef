"""``syncd backup`` without ``--url`` next to a server serving TLS: the default
URL from ``SERVICE_BIND`` is https when ``SERVICE_TLS_CERT`` is set (the server
closes plain HTTP unanswered)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ADMIN
from tests.pki import Pki, client_context, make_pki, start_tls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_the_default_url_is_https_when_the_server_serves_tls(
    spawn_server: Any, pki: Pki, tmp_path: Path
) -> None:
    cert, key = pki.issue("server")
    server = start_tls(spawn_server, cert, key, client_context(pki))
    dest = tmp_path / "copy"
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "backup", str(dest)],
        env={
            **os.environ,
            # The environment the server runs with, as an operator sources it.
            "SERVICE_BIND": f"127.0.0.1:{server.port}",
            "SERVICE_TLS_CERT": str(cert),
            "SERVICE_TLS_KEY": str(key),
            "SERVICE_ADMIN_TOKEN": ADMIN,
            # The client trusts the test CA (urllib's default context reads it).
            "SSL_CERT_FILE": str(pki.ca),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout and (dest / "MANIFEST.json").is_file()
