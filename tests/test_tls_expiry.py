"""A certificate out of its dates, or near its end: the real server serves it
all the same, says so in its log (an error once expired, a warning before),
and exports its end as ``service_tls_certificate_expiry_timestamp_seconds``,
updated by a reload. It says so at the start, at each reload, and while it
runs: when the certificate enters its last EXPIRY_WARNING_DAYS, when it
expires, and every CHECK_INTERVAL_S. The dates are read for every shape of
PEM file a server is given."""

from __future__ import annotations

import asyncio
import datetime
import signal
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from syncd.tls import (
    EXPIRY_WARNING_DAYS,
    Certificates,
    Validity,
    dates_warning,
    next_check_in,
    validity,
)
from tests.conftest import Subprocess
from tests.pki import Pki, client_context, handshake, make_pki
from tests.pki import start_tls as pki_start_tls

GAUGE = "service_tls_certificate_expiry_timestamp_seconds"
DAY = datetime.timedelta(days=1)
STARTS_WITHIN = datetime.timedelta(seconds=12)
"""How far ahead of the test's start a certificate that must expire while its
server runs ends: time for two TLS servers to start first. 6 s was too little
beside a full suite run on a slow machine (both were ready 7 s in); the test
waits for that moment, so more costs its wall time only."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def now() -> datetime.datetime:
    # Certificates hold whole seconds.
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def issue(
    pki: Pki,
    name: str,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
    *,
    rsa_key: bool = False,
) -> tuple[Path, Path]:
    """A certificate for localhost signed by ``pki``'s CA, with these dates."""
    return pki.issue(name, not_before=not_before, not_after=not_after, rsa_key=rsa_key)


def unverified() -> ssl.SSLContext:
    """A client that takes any certificate: how one still gets through to a
    server whose certificate has expired."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def start_tls(spawn_server: Any, cert: Path, key: Path) -> Subprocess:
    """The real server on TLS, once it answers /health/live to a client that
    does not verify its certificate."""
    return pki_start_tls(spawn_server, cert, key, unverified())


def exported_expiry(server: Subprocess) -> float | None:
    answer = httpx.get(f"https://127.0.0.1:{server.port}/metrics", verify=unverified(), timeout=10)
    assert answer.status_code == 200
    for family in text_string_to_metric_families(answer.text):
        if family.name == GAUGE:
            assert family.type == "gauge"
            [sample] = family.samples
            return float(sample.value)
    return None


def warning_line(log: str, said: str, level: str = "WARNING") -> str:
    """The log's line that says ``said``, at ``level``."""
    lines = [line for line in log.splitlines() if said in line]
    assert len(lines) == 1, log
    assert level in lines[0], lines[0]
    return lines[0]


def test_an_expired_certificate_is_served_said_and_exported_and_a_reload_updates_it(
    spawn_server: Any, pki: Pki
) -> None:
    ended = now() - 3 * DAY
    cert, key = issue(pki, "expired", ended - 90 * DAY, ended)
    server = start_tls(spawn_server, cert, key)  # served: the handshake works unverified
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server.port, client_context(pki)).close()
    log = server.log()
    warning = warning_line(log, "expired on", "ERROR")
    assert str(cert) in warning
    assert ended.strftime("%Y-%m-%d %H:%M:%S") in warning
    assert exported_expiry(server) == ended.timestamp()

    # A renewal: the same files rewritten, then SIGHUP.
    renewed_end = now() + 90 * DAY
    renewed_cert, renewed_key = issue(pki, "renewed", now() - DAY, renewed_end)
    cert.write_bytes(renewed_cert.read_bytes())
    key.write_bytes(renewed_key.read_bytes())
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while exported_expiry(server) != renewed_end.timestamp():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    handshake(server.port, client_context(pki)).close()  # verifies now
    # The renewed certificate is fine: nothing more to warn of.
    after = server.log()[len(log) :]
    assert "TLS certificate reloaded" in after, after
    assert "WARNING" not in after and "ERROR" not in after, after
    assert server.proc.poll() is None


@pytest.mark.parametrize(
    ("starts", "ends", "said"),
    [
        (2 * DAY, 90 * DAY, "is not valid before"),
        (-80 * DAY, (EXPIRY_WARNING_DAYS - 4) * DAY, "expires on"),
    ],
    ids=["not-yet-valid", "expires-soon"],
)
def test_a_certificate_not_valid_yet_or_near_its_end_is_served_and_said(
    spawn_server: Any,
    pki: Pki,
    starts: datetime.timedelta,
    ends: datetime.timedelta,
    said: str,
) -> None:
    at = now()
    cert, key = issue(pki, f"dates{starts.days}", at + starts, at + ends)
    server = start_tls(spawn_server, cert, key)
    warning = warning_line(server.log(), said)
    assert str(cert) in warning
    date = (at + (starts if said == "is not valid before" else ends)).strftime("%Y-%m-%d %H:%M:%S")
    assert date in warning
    assert exported_expiry(server) == (at + ends).timestamp()


def test_a_certificate_well_within_its_dates_is_not_warned_of(spawn_server: Any, pki: Pki) -> None:
    at = now()
    cert, key = issue(pki, "fine", at - DAY, at + (EXPIRY_WARNING_DAYS + 30) * DAY)
    server = start_tls(spawn_server, cert, key)
    assert exported_expiry(server) == (at + (EXPIRY_WARNING_DAYS + 30) * DAY).timestamp()
    assert "WARNING" not in server.log(), server.log()


def test_the_dates_read_are_those_of_the_first_certificate(pki: Pki, tmp_path: Path) -> None:
    at = now()
    cases = [
        (at - DAY, at + DAY, False),
        (at - DAY, at + 400 * DAY, True),  # an RSA key
        # UTCTime ends in 2049; from 2050 on the dates are GeneralizedTime.
        (
            datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC),
            datetime.datetime(2050, 1, 1, tzinfo=datetime.UTC),
            False,
        ),
    ]
    for index, (starts, ends, rsa_key) in enumerate(cases):
        cert, key = issue(pki, f"read{index}", starts, ends, rsa_key=rsa_key)
        loaded = x509.load_pem_x509_certificate(cert.read_bytes())
        assert loaded.not_valid_after_utc == ends
        expected = Validity(starts.timestamp(), ends.timestamp())
        assert validity(cert) == expected
        # A full chain: the server's own certificate first, then the CA's.
        chain = tmp_path / f"chain{index}.pem"
        chain.write_bytes(cert.read_bytes() + pki.ca.read_bytes())
        assert validity(chain) == expected
        # The key and the certificate in one file.
        both = tmp_path / f"both{index}.pem"
        both.write_bytes(key.read_bytes() + cert.read_bytes())
        assert validity(both) == expected
    for text in ("", "not a certificate\n"):
        nothing = tmp_path / "nothing.pem"
        nothing.write_text(text)
        with pytest.raises(ValueError, match=r"nothing\.pem: the first certificate cannot be"):
            validity(nothing)
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n")
    with pytest.raises(ValueError, match="cannot be decoded"):
        validity(broken)


def test_what_is_said_of_each_date() -> None:
    cert = Path("/etc/syncd/cert.pem")
    dates = Validity(1_000_000.0, 1_000_000.0 + 90 * 86400)
    assert dates_warning(cert, dates, dates.not_before + 86400) is None
    assert dates_warning(cert, dates, dates.not_before - 1) is not None
    late = dates.not_after - EXPIRY_WARNING_DAYS * 86400
    assert dates_warning(cert, dates, late - 1) is None
    soon = dates_warning(cert, dates, late + 1)
    assert soon is not None and "expires on 1970-04-12" in soon and "14.0 days" in soon
    for left, said in ((7200.0, "in 2.0 hours"), (300.0, "in 5 minutes"), (4.0, "in 4 seconds")):
        warning = dates_warning(cert, dates, dates.not_after - left)
        assert warning is not None and said in warning, warning
    over = dates_warning(cert, dates, dates.not_after)
    assert over is not None and "expired on 1970-04-12 13:46:40 UTC" in over
    assert str(cert) in over


def wait_for_line(server: Subprocess, said: str, until: float) -> str:
    """The log once a line says ``said``, by ``until`` (unix time)."""
    while True:
        log = server.log()
        if said in log:
            return log
        assert time.time() < until, log
        time.sleep(0.05)


def test_a_certificate_is_said_to_expire_and_to_have_expired_while_it_is_served(
    spawn_server: Any, pki: Pki, tmp_path: Path
) -> None:
    """A running server says when its certificate enters its last
    EXPIRY_WARNING_DAYS (a warning) and when it expires (an error), at those
    moments: not only at the start and at a reload."""
    at = now()
    # Seconds ahead: the servers start well before, and each moment comes
    # while they run.
    ahead = STARTS_WITHIN
    expiring_cert, expiring_key = issue(pki, "expiring", at - DAY, at + ahead)
    window = datetime.timedelta(days=EXPIRY_WARNING_DAYS)
    nearing_cert, nearing_key = issue(pki, "nearing", at - DAY, at + window + ahead)
    expiring = start_tls(spawn_server, expiring_cert, expiring_key)
    nearing = start_tls(
        # A data directory of its own: one store per directory.
        lambda env, **kw: spawn_server(
            {**env, "SERVICE_DATA_DIR": str(tmp_path / "nearing")}, **kw
        ),
        nearing_cert,
        nearing_key,
    )
    assert time.time() < (at + ahead).timestamp() - 1, "the servers started too late"

    started = expiring.log()
    warning_line(started, "expires on")  # within its last days from the start
    assert "ERROR" not in started, started
    assert "WARNING" not in nearing.log(), nearing.log()

    until = (at + ahead).timestamp() + 5
    log = wait_for_line(expiring, "expired on", until)
    error = warning_line(log, "expired on", "ERROR")
    assert str(expiring_cert) in error
    assert (at + ahead).strftime("%Y-%m-%d %H:%M:%S") in error
    # Said no sooner than it happened.
    assert time.time() >= (at + ahead).timestamp()
    log = wait_for_line(nearing, "expires on", until)
    warning = warning_line(log, "expires on")
    assert str(nearing_cert) in warning and "in 14.0 days" in warning

    # Both still served, and still exported as they are.
    assert exported_expiry(expiring) == (at + ahead).timestamp()
    assert exported_expiry(nearing) == (at + window + ahead).timestamp()
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(expiring.port, client_context(pki)).close()
    handshake(nearing.port, client_context(pki)).close()


async def test_what_is_wrong_is_said_again_every_check_interval(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """The check repeats every ``check_every_s`` (CHECK_INTERVAL_S in the
    server), an error each time for an expired certificate, until closed."""
    at = now()
    cert, key = issue(pki, "reminded", at - 90 * DAY, at - DAY)
    caplog.set_level("INFO", logger="syncd.tls")
    certificates = Certificates(cert, key, check_every_s=0.05)
    try:
        await asyncio.sleep(0.4)
    finally:
        certificates.close()
    said = [r for r in caplog.records if "expired on" in r.getMessage()]
    assert len(said) >= 4, said
    assert {r.levelname for r in said} == {"ERROR"}
    closed = len(caplog.records)
    await asyncio.sleep(0.15)
    assert len(caplog.records) == closed


def test_the_next_check_comes_at_each_moment_that_changes_what_is_said() -> None:
    day = 86400.0
    dates = Validity(1_000_000.0, 1_000_000.0 + 90 * day)
    window_starts = dates.not_after - EXPIRY_WARNING_DAYS * day
    # Well within its dates: a day, the interval.
    assert next_check_in(dates, dates.not_before + 10 * day) == 86400.0
    # Just before each moment: just after it.
    for moment in (dates.not_before, window_starts, dates.not_after):
        assert next_check_in(dates, moment - 2.0) == pytest.approx(2.001)
        assert next_check_in(dates, moment - 2.0, interval=1.0) == 1.0
    # Past its end: the interval, a reminder.
    assert next_check_in(dates, dates.not_after + 1.0) == 86400.0
