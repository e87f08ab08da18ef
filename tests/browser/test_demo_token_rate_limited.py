"""The demo page when the token endpoint answers 429 (20 tokens a minute per
address: visitors behind one NAT run out): it says so and tries again after
Retry-After, instead of throwing on its first fetch and never loading. (Real
headless Chromium, a real server; the test waits out the real window.)"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx

from syncd.http.handlers.demo import DEMO_TOKEN_WINDOW_MS, DEMO_TOKENS_PER_WINDOW
from tests.browser.conftest import Browser
from tests.conftest import Subprocess

WINDOW_S = DEMO_TOKEN_WINDOW_MS / 1000


def test_the_page_waits_out_a_429_and_loads(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    server = spawn_server({"SERVICE_DEMO": "true", "SERVICE_LOG_LEVEL": "warning"})
    with httpx.Client(base_url=server.url) as client:
        for _ in range(DEMO_TOKENS_PER_WINDOW):
            assert client.get("/demo/token").status_code == 200
        refused = client.get("/demo/token")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    rm = uuid.uuid4().hex[:12]
    browser.call("open", page="Ann", url=f"{server.url}/demo/?room={rm}&name=Ann", wait=False)
    browser.call(
        "wait",
        page="Ann",
        js="!document.getElementById('wait').hidden"
        " && /Too many demo visitors/.test(document.getElementById('wait').textContent)",
    )
    # The socket and the editor wait for the page's token: Retry-After, then a new one.
    budget_s = WINDOW_S + 30
    browser.call(
        "wait",
        timeout=budget_s + 5,
        page="Ann",
        js="window.syncdDemo?.state().status === 'open'",
        timeout_ms=budget_s * 1000,
    )
    assert browser.call("eval", page="Ann", js="document.getElementById('wait').hidden") is True
    errors = [line for line in browser.call("logs") if "pageerror" in line]
    assert errors == [], errors
