"""A throw-away certificate authority for TLS tests (the `cryptography` package)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from tests.conftest import Subprocess


@dataclass
class Pki:
    ca: Path
    ca_key: ec.EllipticCurvePrivateKey
    ca_cert: x509.Certificate
    root: Path

    def issue(
        self,
        name: str,
        serial: int | None = None,
        *,
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
        rsa_key: bool = False,
    ) -> tuple[Path, Path]:
        """A certificate for localhost (and 127.0.0.1) signed by the CA, and
        its key: valid from a minute ago for a day unless dates are given;
        an EC key, or an RSA one."""
        key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
            rsa.generate_private_key(65537, 2048)
            if rsa_key
            else ec.generate_private_key(ec.SECP256R1())
        )
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number() if serial is None else serial)
            .not_valid_before(not_before or now - datetime.timedelta(minutes=1))
            .not_valid_after(not_after or now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .sign(self.ca_key, hashes.SHA256())
        )
        cert_path, key_path = self.root / f"{name}.crt", self.root / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_path, key_path


def make_pki(root: Path) -> Pki:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "syncd test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    ca = root / "ca.crt"
    ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pki(ca, key, cert, root)


def client_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.set_alpn_protocols(["http/1.1"])
    return context


def handshake(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw, server_hostname="localhost")


def start_tls(spawn_server: Any, cert: Path, key: Path, context: ssl.SSLContext) -> Subprocess:
    """The real server on TLS with ``cert`` and ``key``, once it answers
    /health/live to a client with ``context``."""
    server: Subprocess = spawn_server(
        {"SERVICE_TLS_CERT": str(cert), "SERVICE_TLS_KEY": str(key)}, ready=False
    )
    deadline = time.monotonic() + 20
    while True:
        assert server.proc.poll() is None, server.log()
        try:
            with handshake(server.port, context) as tls:
                tls.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
                if tls.recv(64).startswith(b"HTTP/1.1 200"):
                    return server
        except OSError:
            pass
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
