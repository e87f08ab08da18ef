"""Native TLS: HTTPS and wss:// on the same port, with the certificate reloadable.

``SERVICE_TLS_CERT`` and ``SERVICE_TLS_KEY`` (PEM files) make the server wrap
every accepted connection in TLS: 1.2 or newer, ALPN ``http/1.1``, the
standard library's default (modern) ciphers. ``reload`` loads the files again
into the same context, so new handshakes get the new certificate while
connections already open keep theirs: ``systemctl reload`` (SIGHUP) after a
certbot or ACME renewal swaps it without dropping anyone.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Final

log = logging.getLogger("syncd.tls")

MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
"""TLS 1.0 and 1.1 are refused (deprecated by RFC 8996)."""

ALPN_PROTOCOLS: Final = ("http/1.1",)
"""What the server speaks: HTTP/1.1 (and WebSocket upgrades over it)."""


class TlsError(ValueError):
    """The certificate or key cannot be used; ``variable`` names the setting to fix."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for ``cert`` and ``key``; TlsError naming the variable at fault."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = MINIMUM_VERSION
    context.set_alpn_protocols(list(ALPN_PROTOCOLS))
    load(context, cert, key)
    return context


def load(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    for variable, path in (("SERVICE_TLS_CERT", cert), ("SERVICE_TLS_KEY", key)):
        if not path.is_file():
            raise TlsError(variable, f"{path} is not a readable file")
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        # OpenSSL names the part it choked on: a key that does not match, or a
        # file that is not a key, points at the key; anything else at the cert.
        reason = str(exc.reason or exc).lower()
        variable = "SERVICE_TLS_KEY" if "key" in reason else "SERVICE_TLS_CERT"
        raise TlsError(variable, f"cannot use {cert} with {key}: {exc.reason or exc}") from None
    except OSError as exc:
        raise TlsError("SERVICE_TLS_CERT", f"cannot read {cert} or {key}: {exc}") from None


class Certificates:
    """The server's TLS context and where its files are, for reloads."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self.context = server_context(cert, key)

    def reload(self) -> bool:
        """Load the files again into the same context; on failure keep serving
        the old certificate and say why."""
        try:
            load(self.context, self.cert, self.key)
        except TlsError as exc:
            log.error("TLS reload failed, still serving the previous certificate: %s", exc)
            return False
        log.info("TLS certificate reloaded from %s", self.cert)
        return True
