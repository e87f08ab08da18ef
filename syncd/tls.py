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

OpenSSL loads a certificate that has expired, or is not valid yet, without a
word, and every client that verifies it then fails its handshake. So at the
start and at each reload the server's own certificate's dates are read
(:func:`validity`) and a warning names the file and the date when it is out of
its dates or within :data:`EXPIRY_WARNING_DAYS` of its end; it is served all
the same (refusing it would turn a late renewal into an outage), and its end
is exported as ``service_tls_certificate_expiry_timestamp_seconds``.
"""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from cryptography import x509

log = logging.getLogger("syncd.tls")

MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
"""TLS 1.0 and 1.1 are refused (deprecated by RFC 8996)."""

ALPN_PROTOCOLS: Final = ("http/1.1",)
"""What the server speaks: HTTP/1.1 (and WebSocket upgrades over it)."""


EXPIRY_WARNING_DAYS: Final = 14
"""A certificate that ends within this many days gets a warning at the start
and at each reload: two weeks leave time to notice a renewal that did not
happen (certbot and other ACME clients renew 30 days ahead)."""

SECONDS_PER_DAY: Final = 86400


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


@dataclass(frozen=True)
class Validity:
    """A certificate's notBefore and notAfter, as unix timestamps."""

    not_before: float
    not_after: float


def validity(cert: Path) -> Validity:
    """The dates of the first certificate in the PEM file ``cert`` (the
    server's own: a chain starts with it); ValueError if it has none or it
    cannot be read. The standard library decodes certificates only for its
    client side (a verified peer's ``getpeercert``), so ``cryptography``
    reads them."""
    try:
        data = cert.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {cert}: {exc}") from None
    try:
        leaf = x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise ValueError(f"{cert}: the first certificate cannot be decoded ({exc})") from None
    return Validity(leaf.not_valid_before_utc.timestamp(), leaf.not_valid_after_utc.timestamp())


def _date(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def dates_warning(cert: Path, dates: Validity, now: float) -> str | None:
    """What to tell the operator about ``dates`` at ``now``, or None when
    they are fine."""
    if now >= dates.not_after:
        return (
            f"the TLS certificate {cert} expired on {_date(dates.not_after)}:"
            " clients that verify certificates fail every handshake;"
            " renew it and reload (SIGHUP)"
        )
    if now < dates.not_before:
        return (
            f"the TLS certificate {cert} is not valid before {_date(dates.not_before)}:"
            " clients that verify certificates fail every handshake until then"
            " (or the clock of this machine is wrong)"
        )
    left = dates.not_after - now
    if left < EXPIRY_WARNING_DAYS * SECONDS_PER_DAY:
        return (
            f"the TLS certificate {cert} expires on {_date(dates.not_after)},"
            f" in {left / SECONDS_PER_DAY:.1f} days: renew it and reload (SIGHUP)"
        )
    return None


class Certificates:
    """The server's TLS context and where its files are, for reloads.

    ``context`` is the one the listening socket was made with; a reload
    builds a whole new context from the files and has every later handshake
    switch to it (from the server-name callback, which OpenSSL calls for
    every ClientHello, with or without SNI). Loading the files again into
    ``context`` itself would not do: when the certificate loads and the key
    does not, OpenSSL has already dropped the old key, and every handshake
    after that failed reload would fail.

    ``not_after`` is the end of the certificate being served (unix time),
    None if its dates could not be read."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self.context = server_context(cert, key)
        self._current = self.context
        self.context.sni_callback = self._use_current
        self.not_after = self._check_dates()

    def _check_dates(self) -> float | None:
        """Warn of a certificate out of its dates or near its end, and return
        that end; served all the same: refusing it would turn a renewal that
        came late into an outage."""
        try:
            dates = validity(self.cert)
        except ValueError as exc:
            # OpenSSL has just loaded the file, so this is a decoder's limit,
            # not a bad certificate: serve, and say the dates are unknown.
            log.warning("cannot read the TLS certificate's dates: %s", exc)
            return None
        problem = dates_warning(self.cert, dates, time.time())
        if problem is not None:
            log.warning("%s", problem)
        return dates.not_after

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
        self.not_after = self._check_dates()
        return True
