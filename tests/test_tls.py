"""Native TLS against the real server process: HTTPS and wss:// on one port, ALPN,
old protocol versions refused, a certificate reloaded by SIGHUP with a
connection open across it, and bad files stopping the start with one line.
A throw-away CA and certificates are made per test module."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.conftest import ADMIN, Subprocess
from tests.pki import Pki, client_context, handshake, make_pki
from tests.pki import start_tls as pki_start_tls

AUTH = {"authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def start_tls(spawn_server: Any, pki: Pki, cert: Path, key: Path) -> Subprocess:
    """The real server on TLS, once it answers /health/live over HTTPS."""
    return pki_start_tls(spawn_server, cert, key, client_context(pki))


def served_serial(port: int, pki: Pki) -> int:
    with handshake(port, client_context(pki)) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_https_and_wss_on_one_port(spawn_server: Any, pki: Pki) -> None:
    cert, key = pki.issue("a", 100)
    server = start_tls(spawn_server, pki, cert, key)
    with handshake(server.port, client_context(pki)) as tls:
        assert tls.selected_alpn_protocol() == "http/1.1"
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    base = f"https://localhost:{server.port}"
    with httpx.Client(base_url=base, verify=client_context(pki), headers=AUTH) as http:
        answer = http.post("/v1/namespaces/t/crdts/gc:tls/ops", json={"op": "increment"})
        assert answer.status_code == 200 and answer.json()["seq"] == 1

    async def over_wss() -> list[dict[str, Any]]:
        url = f"wss://localhost:{server.port}/v1/namespaces/t/ws?token={ADMIN}"
        async with websockets.connect(url, ssl=client_context(pki)) as ws:
            await ws.send(json.dumps({"kind": "subscribe", "id": "gc:tls"}))
            await ws.send(
                json.dumps({"kind": "op", "id": "gc:tls", "op": {"op": "increment"}, "ref": 1})
            )
            got = []
            while len(got) < 4:
                got.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
            return got

    kinds = {message["kind"] for message in asyncio.run(over_wss())}
    assert kinds == {"snapshot", "synced", "ack", "op"}
    # Plain HTTP on the TLS port is not served: it is told to use HTTPS
    # (tests/test_tls_plain_http.py).
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
        plain.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert plain.recv(100).startswith(b"HTTP/1.1 400 Bad Request")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
def test_tls_1_0_and_1_1_are_refused(spawn_server: Any, pki: Pki, version: ssl.TLSVersion) -> None:
    cert, key = pki.issue("old", 101)
    server = start_tls(spawn_server, pki, cert, key)
    context = client_context(pki)
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = version
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(server.port, context).close()


def test_sighup_reloads_the_certificate_without_dropping_anyone(
    spawn_server: Any, pki: Pki
) -> None:
    cert, key = pki.issue("live", 200)
    server = start_tls(spawn_server, pki, cert, key)
    assert served_serial(server.port, pki) == 200
    base = f"https://localhost:{server.port}"
    with httpx.Client(base_url=base, verify=client_context(pki), headers=AUTH) as http:
        assert http.get("/health/live").status_code == 200  # one kept-alive connection
        renewed_cert, renewed_key = pki.issue("renewed", 201)
        cert.write_bytes(renewed_cert.read_bytes())
        key.write_bytes(renewed_key.read_bytes())
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        done = 0
        while served_serial(server.port, pki) != 201:  # new handshakes get the new one
            assert time.monotonic() < deadline, "the certificate was not reloaded"
            # Meanwhile the open connection goes on answering.
            assert (
                http.post("/v1/namespaces/t/crdts/gc:r/ops", json={"op": "increment"}).status_code
                == 200
            )
            done += 1
        for _ in range(20):
            assert (
                http.post("/v1/namespaces/t/crdts/gc:r/ops", json={"op": "increment"}).status_code
                == 200
            )
        assert http.get("/v1/namespaces/t/crdts/gc:r").json()["value"] == done + 20
    assert server.proc.poll() is None


def test_a_bad_reload_keeps_the_old_certificate(spawn_server: Any, pki: Pki) -> None:
    cert, key = pki.issue("keep", 300)
    server = start_tls(spawn_server, pki, cert, key)
    key.write_text("not a key\n")
    server.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert server.proc.poll() is None
    assert served_serial(server.port, pki) == 300


def start_error(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={**os.environ, "SERVICE_BIND": "127.0.0.1:0", "SERVICE_DATA_DIR": str(tmp_path), **env},
        stdin=subprocess.DEVNULL,  # an OpenSSL passphrase prompt must not wait on it
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_files_stop_the_start_with_one_line(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.issue("bad", 400)
    other_cert, other_key = pki.issue("other", 401)
    reversed_chain = tmp_path / "reversed.crt"
    reversed_chain.write_bytes(pki.ca.read_bytes() + cert.read_bytes())
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        serialization.load_pem_private_key(key.read_bytes(), None).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    cases = [
        ({"SERVICE_TLS_CERT": str(cert)}, "SERVICE_TLS_KEY"),
        (
            {"SERVICE_TLS_CERT": str(tmp_path / "missing.crt"), "SERVICE_TLS_KEY": str(key)},
            "SERVICE_TLS_CERT",
        ),
        ({"SERVICE_TLS_CERT": str(cert), "SERVICE_TLS_KEY": str(other_key)}, "SERVICE_TLS_KEY"),
        ({"SERVICE_TLS_CERT": str(key), "SERVICE_TLS_KEY": str(key)}, "SERVICE_TLS_CERT"),
        # A file that is not a PEM key is the key's fault, not the certificate's.
        ({"SERVICE_TLS_CERT": str(cert), "SERVICE_TLS_KEY": str(cert)}, "SERVICE_TLS_KEY"),
        # A chain with the CA first pairs the key with the CA's certificate.
        ({"SERVICE_TLS_CERT": str(reversed_chain), "SERVICE_TLS_KEY": str(key)}, "SERVICE_TLS_KEY"),
        # An encrypted key: refused, never a passphrase prompt.
        ({"SERVICE_TLS_CERT": str(cert), "SERVICE_TLS_KEY": str(encrypted)}, "SERVICE_TLS_KEY"),
    ]
    for env, variable in cases:
        result = start_error(env, tmp_path)
        assert result.returncode != 0, env
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith(f"syncd: {variable}:"), (env, lines[0])
    del other_cert


def test_a_reload_that_cannot_load_the_new_key_keeps_serving_the_old_pair(
    spawn_server: Any, pki: Pki
) -> None:
    # A renewal that wrote the new certificate but left the key unusable: the
    # certificate loads and the key does not, and the old pair must go on.
    cert, key = pki.issue("half", 310)
    server = start_tls(spawn_server, pki, cert, key)
    renewed_cert, _ = pki.issue("half-renewed", 311)
    cert.write_bytes(renewed_cert.read_bytes())
    key.write_text("not a key\n")
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS reload failed" not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    assert served_serial(server.port, pki) == 310
    assert server.proc.poll() is None


def test_a_handshake_gets_the_header_timeout(spawn_server: Any, pki: Pki) -> None:
    cert, key = pki.issue("slow", 320)
    server: Subprocess = spawn_server(
        {
            "SERVICE_TLS_CERT": str(cert),
            "SERVICE_TLS_KEY": str(key),
            "SERVICE_HEADER_TIMEOUT_S": "0.5",
        },
        ready=False,
    )
    start_tls_ready = time.monotonic() + 20
    while True:
        try:
            handshake(server.port, client_context(pki)).close()
            break
        except OSError:
            assert time.monotonic() < start_tls_ready, server.log()
            time.sleep(0.05)
    # Connected, then nothing, or the first bytes of a ClientHello and no more.
    for first in (b"", b"\x16\x03\x01"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as silent:
            if first:
                silent.sendall(first)
            started = time.monotonic()
            assert silent.recv(100) == b""
            assert time.monotonic() - started < 5, "the handshake was not timed out"


def test_a_server_without_tls_does_not_import_cryptography() -> None:
    """``cryptography`` (about a tenth of the server's import time) is read
    only when a certificate is: the dates of the TLS tests above show that it
    still is then."""
    code = (
        "import sys\n"
        "import syncd.app, syncd.cli, syncd.server\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
