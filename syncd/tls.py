"""Native TLS: HTTPS and wss:// on the same port, with the certificate reloadable.

``SERVICE_TLS_CERT`` and ``SERVICE_TLS_KEY`` (PEM files) make the server wrap
every accepted connection in TLS: 1.2 or newer, ALPN ``http/1.1``, the
standard library's default (modern) ciphers. ``reload`` loads the files again
into a new context that new handshakes switch to, while connections already
open keep theirs: ``systemctl reload`` (SIGHUP) after a certbot or ACME
renewal swaps it without dropping anyone, and a renewal that left a file
unusable changes nothing.

The key must be unencrypted: OpenSSL would otherwise ask for its passphrase
on the terminal, blocking the start or, on SIGHUP, the server.
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


class _EncryptedKey(Exception):
    """The key file asked for a passphrase (raised by :func:`_no_passphrase`)."""


def _no_passphrase() -> bytes:
    """The password callback: without one, OpenSSL asks for a passphrase on
    the terminal, so an encrypted key would block the start (or, on SIGHUP,
    the whole server) until someone typed one."""
    raise _EncryptedKey


def load(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    for variable, path in (("SERVICE_TLS_CERT", cert), ("SERVICE_TLS_KEY", key)):
        if not path.is_file():
            raise TlsError(variable, f"{path} is not a readable file")
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _EncryptedKey:
        raise TlsError(
            "SERVICE_TLS_KEY",
            f"{key} is encrypted (it has a passphrase); syncd needs the key unencrypted,"
            " readable only by its user",
        ) from None
    except ssl.SSLError as exc:
        raise TlsError(*_problem(cert, key, exc)) from None
    except OSError as exc:
        raise TlsError("SERVICE_TLS_CERT", f"cannot read {cert} or {key}: {exc}") from None


def _problem(cert: Path, key: Path, exc: ssl.SSLError) -> tuple[str, str]:
    """The variable to blame for ``exc``, and what is wrong. OpenSSL names a
    key that does not match the certificate, but a file that is not PEM at
    all is "PEM lib" whichever it is: a certificate file that holds no
    certificate is the certificate's fault, anything else the key's."""
    reason = str(exc.reason or exc)
    if "key" in reason.lower():
        # Also what a chain in the wrong order looks like: OpenSSL pairs the
        # key with the file's first certificate.
        return "SERVICE_TLS_KEY", (
            f"{key} is not the key of the first certificate in {cert} ({reason});"
            " the server's own certificate must come first, then its chain"
        )
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except (ssl.SSLError, OSError):
        return "SERVICE_TLS_CERT", f"{cert} holds no PEM certificate ({reason})"
    return "SERVICE_TLS_KEY", f"{key} is not a PEM private key ({reason})"


class Certificates:
    """The server's TLS context and where its files are, for reloads.

    ``context`` is the one the listening socket was made with; a reload
    builds a whole new context from the files and has every later handshake
    switch to it (from the server-name callback, which OpenSSL calls for
    every ClientHello, with or without SNI). Loading the files again into
    ``context`` itself would not do: when the certificate loads and the key
    does not, OpenSSL has already dropped the old key, and every handshake
    after that failed reload would fail."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self.context = server_context(cert, key)
        self._current = self.context
        self.context.sni_callback = self._use_current

    def _use_current(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        if self._current is not self.context:
            connection.context = self._current

    def reload(self) -> bool:
        """Load the files into a new context for new handshakes; on failure
        keep serving the old certificate and say why."""
        try:
            self._current = server_context(self.cert, self.key)
        except TlsError as exc:
            log.error("TLS reload failed, still serving the previous certificate: %s", exc)
            return False
        log.info("TLS certificate reloaded from %s", self.cert)
        return True
