"""``syncd health``: ask the server on this machine whether it is ready.

A container's health check (the Dockerfile's ``HEALTHCHECK``) or any local
probe, reading the settings ``syncd serve`` reads: the address from
``SERVICE_BIND`` (an any-address is asked on the loopback: ``0.0.0.0`` and
``[::]``, whose socket is dual-stack, on 127.0.0.1), the scheme from
``SERVICE_TLS_CERT`` (the TLS port answers nothing else). It asks
``/health/ready`` and exits 0 on a 200 or on the 503 of a graceful drain
(``draining``), 1 on anything else (a refused connection, a timeout, a 503
while storage takes no writes, a bad setting): a container engine reads exit
1 as unhealthy, and keeps 2 for itself.

A drain (SIGTERM, SERVICE_SHUTDOWN_DRAIN_S) is a healthy process finishing
its work: readiness says 503 so that load balancers send new work elsewhere,
but the container is not unhealthy. Counted as unhealthy, a drain longer
than ``--interval`` times ``--retries`` marked the container unhealthy, and
an orchestrator that replaces unhealthy containers killed it mid-drain.

Over TLS, the loopback is asked without checking the certificate (it is this
machine's own server; a renewed certificate on disk that the server has not
reloaded yet must not make it unhealthy); another address is checked
against ``SERVICE_TLS_CERT`` itself (each certificate in the file trusted as
it is, the host name not checked: the address is the one ``SERVICE_BIND``
names, not the name the certificate is for).
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import signal
import socket
import ssl
import sys
from collections.abc import Mapping
from typing import Final

from syncd.bind import DEFAULT_BIND, parse_bind
from syncd.cli.command import Commands, add_command

HEALTH_TIMEOUT_S: Final = 2.0
"""How long the connection and the whole answer may take together: below the
Dockerfile's ``HEALTHCHECK --timeout`` (3 s), so that a server that does not
answer is reported here in one line rather than killed by the engine. One
bound for the whole check (a timer, see :func:`run`), not a socket timeout
per read: a server that trickled its answer a byte at a time kept each read
under its timeout and held the check for as long as it liked."""

READY_PATH: Final = "/health/ready"

DRAINING: Final = "draining"
"""``/health/ready``'s status (with a 503) from SIGTERM on: healthy here."""

UNHEALTHY: Final = 1
"""The exit status of every failure: Docker reserves 2."""


def register(commands: Commands) -> None:
    add_command(
        commands,
        "health",
        run,
        help="ask the local server's /health/ready (a container health check); exit 0 or 1",
        description="Ask the server that SERVICE_BIND and SERVICE_TLS_CERT describe, on this "
        "machine, for /health/ready: exit 0 when it answers 200 (or 503 draining: a graceful "
        "stop is under way), 1 otherwise.",
    )


def local_address(env: Mapping[str, str]) -> tuple[str, int]:
    """Where the server ``SERVICE_BIND`` describes is reached from this
    machine; ValueError naming the setting when it is bad."""
    bind = env.get("SERVICE_BIND") or DEFAULT_BIND
    try:
        host, port = parse_bind(bind)
    except ValueError as exc:
        raise ValueError(f"SERVICE_BIND {bind!r}: {exc}") from None
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host, port  # a name: the server listens on what it resolves to
    if address.is_unspecified:
        # [::] is dual-stack where the host can make it so (syncd.server.dual_stack_socket):
        # 127.0.0.1 reaches it even with IPv6 switched off, where ::1 is no address.
        ipv6_only = address.version == 6 and not socket.has_dualstack_ipv6()
        return ("::1" if ipv6_only else "127.0.0.1"), port
    return host, port


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.partition("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def tls_context(host: str, cert_file: str) -> ssl.SSLContext:
    """What a TLS connection to ``host`` checks (see the module's text)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["http/1.1"])
    context.check_hostname = False
    if _is_loopback(host):
        context.verify_mode = ssl.CERT_NONE
        return context
    context.load_verify_locations(cafile=cert_file)
    # The server's own certificate is the trust anchor, not only a CA above it.
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


def check(env: Mapping[str, str]) -> str | None:
    """Why the local server is not ready, or None when it answers 200."""
    host, port = local_address(env)
    cert_file = env.get("SERVICE_TLS_CERT")
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if cert_file else 'http'}://{shown}:{port}{READY_PATH}"
    connection: http.client.HTTPConnection
    if cert_file:
        try:
            context = tls_context(host, cert_file)
        except (OSError, ssl.SSLError) as exc:
            return f"SERVICE_TLS_CERT {cert_file}: {exc}"
        connection = http.client.HTTPSConnection(
            host, port, timeout=HEALTH_TIMEOUT_S, context=context
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=HEALTH_TIMEOUT_S)
    try:
        connection.request("GET", READY_PATH, headers={"Connection": "close"})
        response = connection.getresponse()
        body = response.read(1024)
    except TimeoutError:
        return f"{url}: no answer within {HEALTH_TIMEOUT_S:g} s"
    except (OSError, http.client.HTTPException) as exc:
        return f"{url}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
    finally:
        connection.close()
    if response.status != 200 and not _draining(response.status, body):
        text = body.decode("utf-8", "replace").strip().replace("\n", " ")[:200]
        return f"{url}: {response.status} {text}".rstrip()
    return None


def _draining(status: int, body: bytes) -> bool:
    """The answer is readiness's 503 of a graceful drain (see the module's text)."""
    if status != 503:
        return False
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("status") == DRAINING


def _out_of_time(signum: int, frame: object) -> None:
    raise TimeoutError


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    # The CLI's main thread: SIGALRM ends the check wherever it waits.
    previous = signal.signal(signal.SIGALRM, _out_of_time)
    signal.setitimer(signal.ITIMER_REAL, HEALTH_TIMEOUT_S)
    try:
        problem = check(env)
    except ValueError as exc:
        problem = str(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if problem is not None:
        print(f"syncd health: {problem}", file=sys.stderr)
        return UNHEALTHY
    return 0
