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
(:func:`validity`), and its end is exported as
``service_tls_certificate_expiry_timestamp_seconds``. The dates of the
certificate being served are judged then, every :data:`CHECK_INTERVAL_S`
while the server runs, and at the moments it enters the last
:data:`EXPIRY_WARNING_DAYS` of its life and expires: a warning names the file
and the date while it is not valid yet or near its end, an error once it has
expired. It is served all the same (refusing it would turn a late renewal
into an outage).

A client that speaks plain HTTP to the TLS port (``http://`` where
``https://`` was meant) is told so: :func:`first_bytes` judges what a new
connection's first bytes are, and the server answers a request line with a
plaintext 400 (as Go's net/http and nginx do) instead of a silent close.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

log = logging.getLogger("syncd.tls")

MINIMUM_VERSION: Final = ssl.TLSVersion.TLSv1_2
"""TLS 1.0 and 1.1 are refused (deprecated by RFC 8996)."""

ALPN_PROTOCOLS: Final = ("http/1.1",)
"""What the server speaks: HTTP/1.1 (and WebSocket upgrades over it)."""

HANDSHAKE_RECORD: Final = 0x16
"""The first byte of every TLS connection: a handshake record (its ClientHello)."""

METHOD_CHARS: Final = frozenset(
    b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
"""What an HTTP method is spelled with (``tchar``, RFC 9110 5.6.2)."""

MAX_METHOD_CHARS: Final = 20
"""The longest method a plain HTTP client is recognised by: the longest
registered ones (``UPDATEREDIRECTREF``, ``BASELINE-CONTROL``) are 17 and 16
characters; longer runs of token characters are taken for garbage."""


class FirstBytes(enum.Enum):
    """What the first bytes of a connection to the TLS port say it speaks."""

    TLS = "tls"
    PLAIN_HTTP = "plain_http"
    OTHER = "other"
    UNDECIDED = "undecided"
    """Too few bytes yet: a method, not yet its space."""


def first_bytes(data: bytes) -> FirstBytes:
    """Judge the first bytes a client sent to the TLS port: a TLS handshake
    record, an HTTP request line (a method, then a space), something else, or
    too little to tell. Only the record type's byte is read of a TLS client,
    so its handshake is not held up; an HTTP client is told after its method
    and the space after it, at most :data:`MAX_METHOD_CHARS` + 1 bytes."""
    if not data:
        return FirstBytes.UNDECIDED
    if data[0] == HANDSHAKE_RECORD:
        return FirstBytes.TLS
    for i, byte in enumerate(data[: MAX_METHOD_CHARS + 1]):
        if byte == 0x20:  # a space
            return FirstBytes.PLAIN_HTTP if i else FirstBytes.OTHER
        if byte not in METHOD_CHARS:
            return FirstBytes.OTHER
    return FirstBytes.UNDECIDED if len(data) <= MAX_METHOD_CHARS else FirstBytes.OTHER


EXPIRY_WARNING_DAYS: Final = 14
"""A certificate that ends within this many days gets a warning (at the start,
at each reload and each check): two weeks leave time to notice a renewal that
did not happen (certbot and other ACME clients renew 30 days ahead)."""

SECONDS_PER_DAY: Final = 86400

CHECK_INTERVAL_S: Final = 86400.0
"""How often the running server judges the served certificate's dates again,
saying again what is wrong with them: once a day, a reminder in the log
without filling it. The moments that change the verdict (the start of the
warning window, the expiry, a notBefore still ahead) get a check of their own
besides, so the error comes when the certificate expires, not up to a day
later."""


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
    # Imported here, not with the module: it is a tenth of the server's
    # import time (about 0.13 s of CPU), and a server without TLS never
    # needs it.
    from cryptography import x509

    try:
        leaf = x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise ValueError(f"{cert}: the first certificate cannot be decoded ({exc})") from None
    return Validity(leaf.not_valid_before_utc.timestamp(), leaf.not_valid_after_utc.timestamp())


def _date(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    """``14.0 days``, ``5.5 hours``, ``12 minutes``, ``4 seconds``: a
    certificate's time left, in the unit that says it best."""
    if seconds >= SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 60:
        return f"{seconds // 60:.0f} minutes"
    return f"{seconds:.0f} seconds"


def dates_warning(cert: Path, dates: Validity, now: float) -> str | None:
    """What to tell the operator about ``dates`` at ``now``, or None when
    they are fine (logged as an error once ``now`` is past ``not_after``, a
    warning otherwise: :func:`say_dates`)."""
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
            f" in {_duration(left)}: renew it and reload (SIGHUP)"
        )
    return None


def say_dates(cert: Path, dates: Validity, now: float) -> None:
    """Log what :func:`dates_warning` says of ``dates``: an error once the
    certificate has expired (every client that verifies it fails now), a
    warning while it is not valid yet or near its end."""
    problem = dates_warning(cert, dates, now)
    if problem is None:
        return
    if now >= dates.not_after:
        log.error("%s", problem)
    else:
        log.warning("%s", problem)


def next_check_in(dates: Validity, now: float, interval: float = CHECK_INTERVAL_S) -> float:
    """Seconds from ``now`` to the next check of ``dates``: ``interval``, or
    sooner when one of the moments that change what :func:`dates_warning`
    says comes first: a millisecond after it, so that the check sees it
    passed (a loop timer may fire a little early by the wall clock; a check
    that comes before the moment plans another one just after it)."""
    moments = (
        dates.not_before,
        dates.not_after - EXPIRY_WARNING_DAYS * SECONDS_PER_DAY,
        dates.not_after,
    )
    return min([interval, *(moment - now + 0.001 for moment in moments if moment > now)])


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
    None if its dates could not be read.

    Made in a running event loop (as the server makes it), it judges the
    served certificate's dates again on that loop every ``check_every_s``
    and at the moments the verdict changes (:func:`next_check_in`), until
    :meth:`close`."""

    def __init__(self, cert: Path, key: Path, *, check_every_s: float = CHECK_INTERVAL_S) -> None:
        self.cert = cert
        self.key = key
        self.context = server_context(cert, key)
        self._current = self.context
        self.context.sni_callback = self._use_current
        self._check_every_s = check_every_s
        self._timer: asyncio.TimerHandle | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self.dates: Validity | None = None
        """The served certificate's dates; None if they could not be read."""
        self._read_dates()

    @property
    def not_after(self) -> float | None:
        return None if self.dates is None else self.dates.not_after

    def _read_dates(self) -> None:
        """Read the dates of the certificate just loaded, say what is wrong
        with them and plan the next check. Served all the same: refusing it
        would turn a renewal that came late into an outage."""
        try:
            self.dates = validity(self.cert)
        except ValueError as exc:
            # OpenSSL has just loaded the file, so this is a decoder's limit,
            # not a bad certificate: serve, and say the dates are unknown.
            log.warning("cannot read the TLS certificate's dates: %s", exc)
            self.dates = None
        self._check()

    def _check(self) -> None:
        """Judge the served certificate's dates now, and plan the next check."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.dates is None:
            return
        now = time.time()
        say_dates(self.cert, self.dates, now)
        if self._loop is not None and not self._loop.is_closed():
            delay = next_check_in(self.dates, now, self._check_every_s)
            self._timer = self._loop.call_later(delay, self._check)

    def close(self) -> None:
        """No more checks."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

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
        self._read_dates()
        return True
