"""syncd behind a real nginx, configured by docs/deploy/nginx.conf itself.

nginx runs as a process of this test (its own prefix, config, port and
temporary files; never the machine's service), terminating TLS with a
throw-away CA's certificate in front of a real syncd. Through it: an op over
HTTPS, an SSE stream that delivers each event at once, a WebSocket over wss://
that receives deltas, the client's address as syncd sees it (from the proxy,
not from a header a client forged), and idle streams that outlive the proxy's
read timeout thanks to syncd's keep-alives.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from syncd.config import DEFAULT_KEEPALIVE_TIMEOUT_S
from syncd.http.handlers.demo import DEMO_TOKENS_PER_WINDOW
from tests.conftest import ADMIN, Subprocess, free_port
from tests.pki import Pki, client_context, make_pki

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "docs" / "deploy" / "nginx.conf"
AUTH = {"authorization": f"Bearer {ADMIN}"}
READ_TIMEOUT_S = 2
"""The proxy's read timeout here (75 s in the docs): short, so the test is."""
SSE_PING_S = "1"
"""Pings (the least SERVICE_SSE_PING_S) keep an idle stream alive past READ_TIMEOUT_S."""
PROXY_ADDRESS = "127.0.0.1"
"""nginx reaches syncd from this address, the one syncd trusts."""
CLIENT_ADDRESS = "127.0.0.3"
OTHER_ADDRESS = "127.0.0.4"


@dataclass
class Deployment:
    url: str
    syncd: Subprocess
    pki: Pki


def nginx_config(root: Path, listen: int, upstream: int, cert: Path, key: Path) -> str:
    site = TEMPLATE.read_text()
    site = site.replace("server 127.0.0.1:3000;", f"server 127.0.0.1:{upstream};")
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{listen} ssl;")
    site = re.sub(r"ssl_certificate\s+\S+;", f"ssl_certificate {cert};", site)
    site = re.sub(r"ssl_certificate_key\s+\S+;", f"ssl_certificate_key {key};", site)
    site = re.sub(r"proxy_read_timeout \d+s;", f"proxy_read_timeout {READ_TIMEOUT_S}s;", site)
    temp = "\n".join(
        f"    {name}_temp_path {root / name};"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {root / 'nginx.pid'};\n"
        f"error_log {root / 'error.log'} warn;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n    access_log off;\n{temp}\n{site}\n}}\n"
    )


@pytest.fixture
def deployment(spawn_server: Any, tmp_path: Path) -> Iterator[Deployment]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.fail("nginx is missing: apt-get install nginx-light")
    pki = make_pki(tmp_path)
    cert, key = pki.issue("proxy", 10)
    syncd = spawn_server(
        {
            "SERVICE_TRUSTED_PROXIES": PROXY_ADDRESS,
            "SERVICE_SSE_PING_S": SSE_PING_S,
            "SERVICE_WS_PING_S": "1",
            "SERVICE_DEMO": "true",
        }
    )
    listen = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_config(tmp_path, listen, syncd.port, cert, key))
    proc = subprocess.Popen(
        [nginx, "-p", str(tmp_path), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"nginx exited: {proc.stderr.read() if proc.stderr else b''!r}"
                )
            try:
                socket.create_connection(("127.0.0.1", listen), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield Deployment(f"https://localhost:{listen}", syncd, pki)
    finally:
        proc.terminate()
        proc.wait(10)


def https(deployment: Deployment, source: str = CLIENT_ADDRESS, **kwargs: Any) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=source, verify=client_context(deployment.pki))
    return httpx.Client(base_url=deployment.url, transport=transport, **kwargs)


def test_an_op_over_https(deployment: Deployment) -> None:
    with https(deployment, headers=AUTH) as http:
        answer = http.post("/v1/namespaces/n/crdts/gc:p/ops", json={"op": "increment"})
        assert answer.status_code == 200 and answer.json()["seq"] == 1
        assert http.get("/v1/namespaces/n/crdts/gc:p").json()["value"] == 1


def test_sse_events_arrive_at_once_and_idle_streams_survive(deployment: Deployment) -> None:
    with https(deployment, headers=AUTH, timeout=10) as http:
        http.post("/v1/namespaces/n/crdts/gc:s/ops", json={"op": "increment"})
        with http.stream("GET", "/v1/namespaces/n/crdts/gc:s/events") as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))  # the snapshot
            for wait in (0.1, 2 * READ_TIMEOUT_S + 1):  # the second idles past the timeout
                time.sleep(wait)
                sent = time.monotonic()
                with https(deployment, headers=AUTH) as writer:
                    answer = writer.post(
                        "/v1/namespaces/n/crdts/gc:s/ops", json={"op": "increment"}
                    )
                assert answer.status_code == 200, answer.text
                assert next(line for line in lines if line.startswith("data: "))
                # Unbuffered: the event is through the proxy at once.
                assert time.monotonic() - sent < 1.0


def test_nginx_lets_go_of_idle_connections_before_syncd_does() -> None:
    """nginx keeps idle connections to syncd open for less than syncd does
    (the upstream's keepalive_timeout under SERVICE_KEEPALIVE_TIMEOUT_S), so a
    request never goes out on a connection syncd is closing at that instant:
    nginx cannot retry a POST there and answers 502 (seen once here: an SSE
    test's op, sent 5 s after the last, never arrived)."""
    upstream = re.search(r"upstream syncd \{(.*?)\}", TEMPLATE.read_text(), re.S)
    assert upstream is not None
    found = re.search(r"keepalive_timeout (\d+)s;", upstream.group(1))
    assert found is not None, "the upstream block sets no keepalive_timeout"
    assert int(found.group(1)) < DEFAULT_KEEPALIVE_TIMEOUT_S


def test_a_websocket_over_wss_receives_deltas(deployment: Deployment) -> None:
    async def session() -> list[str]:
        url = deployment.url.replace("https://", "wss://") + f"/v1/namespaces/n/ws?token={ADMIN}"
        async with websockets.connect(url, ssl=client_context(deployment.pki)) as ws:
            await ws.send(json.dumps({"kind": "subscribe", "id": "gc:w"}))
            await asyncio.sleep(2 * READ_TIMEOUT_S + 1)  # idle past the proxy's timeout
            await ws.send(
                json.dumps({"kind": "op", "id": "gc:w", "op": {"op": "increment"}, "ref": 1})
            )
            kinds = []
            while "op" not in kinds:
                kinds.append(json.loads(await asyncio.wait_for(ws.recv(), 5))["kind"])
            return kinds

    kinds = asyncio.run(session())
    assert kinds[0] in ("snapshot", "ack") and "ack" in kinds and kinds[-1] == "op"


def test_the_client_address_comes_from_the_proxy(deployment: Deployment) -> None:
    # Through nginx from CLIENT_ADDRESS: that address's demo tokens run out.
    with https(deployment) as http:
        for _ in range(DEMO_TOKENS_PER_WINDOW):
            assert http.get("/demo/token").status_code == 200
        assert http.get("/demo/token").status_code == 429
        # A header the client sends does not change who it is to syncd.
        forged = http.get("/demo/token", headers={"x-forwarded-for": OTHER_ADDRESS})
        assert forged.status_code == 429
    # Another client behind the same proxy is someone else.
    with https(deployment, source=OTHER_ADDRESS) as other:
        assert other.get("/demo/token").status_code == 200
    # Straight to syncd from an address that is not the proxy, a forged header is ignored.
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.5")) as direct:
        answer = direct.get(
            f"http://127.0.0.1:{deployment.syncd.port}/demo/token",
            headers={"x-forwarded-for": CLIENT_ADDRESS},
        )
    assert answer.status_code == 200  # counted as 127.0.0.5, not as CLIENT_ADDRESS
