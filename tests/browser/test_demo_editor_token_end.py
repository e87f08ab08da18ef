"""The demo page's rich-text editor (y-websocket 3.1 on a yd: document)
across the end of its token, in real headless Chromium against a real syncd.

syncd closes a y-websocket connection with 4401 when its token expires, and
y-websocket 3.1 takes every close in 4400-4499 as final: it stops
reconnecting and emits ``closed``. The editor refreshed its token only on
status ``disconnected``, so when the demo token ran out it went dead for
good (still editable, nothing sent). A deleted document (4410) must stay
closed, and the page says so."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from tests.browser.conftest import Browser, read_state, wait_until
from tests.conftest import ADMIN, Subprocess

RICH = "[data-testid=rich] .ProseMirror"

TOKEN_TTL_MS = 3000
"""The demo token's life here (SERVICE_MAX_TOKEN_TTL_MS; the demo's own is
15 minutes). Short enough that a test sees it end twice, long enough for a
page to load and sync. Every token the page gets counts against the demo's
20 a minute per address: the page (its SyncSocket and the editor) fetches
about two per token life."""


def _start(spawn_server: Callable[..., Subprocess], port: int | None = None) -> Subprocess:
    env = {
        "SERVICE_DEMO": "true",
        "SERVICE_LOG_LEVEL": "warning",
        "SERVICE_MAX_TOKEN_TTL_MS": str(TOKEN_TTL_MS),
    }
    return spawn_server(env, port=port)


def _rich(browser: Browser, page: str) -> dict[str, Any]:
    state: dict[str, Any] = browser.state(page)["rich"]
    return state


def _served_text(base_url: str, doc_id: str) -> str:
    served = read_state(base_url, f"{doc_id}?root=default&as=xml") or {}
    value = served.get("value") or ""
    return value if isinstance(value, str) else ""


def test_the_editor_keeps_syncing_after_its_token_ends(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    server = _start(spawn_server)
    rm = uuid.uuid4().hex[:12]
    doc_id = f"yd:demo-doc-{rm}"
    browser.call("open", page="Ann", url=f"{server.url}/demo/?room={rm}&name=Ann")
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.synced")
    browser.call("focus", page="Ann", selector=RICH)

    # Two token lives: after each end, what is typed reaches the server.
    for word in ("first", "second"):
        time.sleep(TOKEN_TTL_MS / 1000 + 0.5)
        browser.call("type", page="Ann", text=f"{word} ")
        try:
            wait_until(lambda w=word: w in _served_text(server.url, doc_id), timeout=10)  # type: ignore[misc]
        except AssertionError:
            raise AssertionError(
                f"typed {word!r} after the token ended; the editor: {_rich(browser, 'Ann')}"
            ) from None
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.synced")
    assert _rich(browser, "Ann")["closed"] is None


def test_the_editor_reconnects_after_its_token_is_revoked(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    """A revoked token (4401 'token revoked') still has time left: the editor
    must ask for a new one, not take the one it holds again (refused at every
    upgrade). The demo's own token life here, so none ends meanwhile."""
    server = spawn_server({"SERVICE_DEMO": "true", "SERVICE_LOG_LEVEL": "warning"})
    rm = uuid.uuid4().hex[:12]
    doc_id = f"yd:demo-doc-{rm}"
    browser.call("open", page="Ann", url=f"{server.url}/demo/?room={rm}&name=Ann")
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.synced")
    client_id = browser.call("eval", page="Ann", js="window.syncdDemo.clientId")
    params = "window.syncdDemo.rich.provider.params.token"
    revoked_token = browser.call("eval", page="Ann", js=params)
    revoked = httpx.post(
        f"{server.url}/v1/namespaces/demo/revocations",
        headers={"authorization": f"Bearer {ADMIN}"},
        json={"client_id": client_id},
    )
    assert revoked.status_code == 200, revoked.text
    # Closed (4401 'token revoked'), then on again with another token.
    browser.call("wait", page="Ann", js=f"{params} !== {json.dumps(revoked_token)}")
    browser.call("focus", page="Ann", selector=RICH)
    browser.call("type", page="Ann", text="still here")
    try:
        wait_until(lambda: "still here" in _served_text(server.url, doc_id))
    except AssertionError:
        raise AssertionError(f"after the revocation, the editor: {_rich(browser, 'Ann')}") from None


def test_the_editor_reconnects_when_its_token_ended_while_the_server_was_away(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    """No close code here: the server is gone until the token has ended, so
    the provider's connects fail (no status 'disconnected' after a connect
    that never opened), and the first one after the server's return is
    refused at the upgrade (401: a close 1006 in the browser, which
    y-websocket retries). The token must be renewed between those tries."""
    server = _start(spawn_server)
    rm = uuid.uuid4().hex[:12]
    doc_id = f"yd:demo-doc-{rm}"
    browser.call("open", page="Ann", url=f"{server.url}/demo/?room={rm}&name=Ann")
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.synced")
    assert server.terminate() == 0
    browser.call("wait", page="Ann", js="!window.syncdDemo.state().rich.connected")
    time.sleep(TOKEN_TTL_MS / 1000 + 1)
    server = _start(spawn_server, port=server.port)
    browser.call("focus", page="Ann", selector=RICH)
    browser.call("type", page="Ann", text="back again")
    try:
        wait_until(lambda: "back again" in _served_text(server.url, doc_id))
    except AssertionError:
        raise AssertionError(
            f"after the server's return, the editor: {_rich(browser, 'Ann')}"
        ) from None


def test_a_deleted_document_stays_deleted_and_the_page_says_so(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    server = _start(spawn_server)
    rm = uuid.uuid4().hex[:12]
    doc_id = f"yd:demo-doc-{rm}"
    browser.call("open", page="Ann", url=f"{server.url}/demo/?room={rm}&name=Ann")
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.synced")
    browser.call("focus", page="Ann", selector=RICH)
    browser.call("type", page="Ann", text="soon gone")
    wait_until(lambda: "soon gone" in _served_text(server.url, doc_id))

    gone = httpx.delete(
        f"{server.url}/v1/namespaces/demo/crdts/{doc_id}",
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    assert gone.status_code == 204
    browser.call("wait", page="Ann", js="window.syncdDemo.state().rich.closed?.code === 4410")
    shown = browser.call(
        "eval", page="Ann", js="document.querySelector('[data-testid=rich-status]')?.textContent"
    )
    assert shown and "deleted" in shown, shown
    # Past a token's end and the provider's reconnect backoff: nothing sent
    # the document back, and the editor did not reconnect.
    time.sleep(TOKEN_TTL_MS / 1000 + 1)
    assert read_state(server.url, doc_id) is None
    assert _rich(browser, "Ann")["connected"] is False
