"""The demo page knows its own presence entry after its token is renewed.

Presence entries are kept under the writer's token client id, and every demo
token has a new random one. The page took itself for the client id of its
first token, so once the SyncSocket reconnected with a renewed token (the
demo's 15 minutes, less a minute) the visitor's own entry was someone else's:
listed without "(you)", and its own cursor drawn as another visitor's caret
in its own text area. (Real headless Chromium, a real server whose demo
tokens live 3 s.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from tests.browser.conftest import Browser
from tests.conftest import Subprocess

TOKEN_TTL_MS = 3000


def test_the_page_knows_itself_after_its_token_is_renewed(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    server = spawn_server(
        {
            "SERVICE_DEMO": "true",
            "SERVICE_LOG_LEVEL": "warning",
            "SERVICE_MAX_TOKEN_TTL_MS": str(TOKEN_TTL_MS),
        }
    )
    rm = uuid.uuid4().hex[:12]
    browser.call("open", page="Ann", url=f"{server.url}/demo/?room={rm}&name=Ann")
    browser.call("focus", page="Ann", selector="[data-testid=text]")
    browser.call("type", page="Ann", text="hello")
    # Past a token's end: the socket reconnected with a new token (a new client id).
    time.sleep(TOKEN_TTL_MS / 1000 + 1)
    browser.call("type", page="Ann", text=" again")
    browser.call("wait", page="Ann", js="window.syncdDemo.state().status === 'open'")
    browser.call(
        "wait",
        page="Ann",
        js="[...document.querySelectorAll('#presence li')].map((l) => l.textContent).join() === 'Ann (you)'",
    )
    shown = browser.call(
        "eval",
        page="Ann",
        js=(
            "({ self: document.querySelectorAll('#presence li.self').length,"
            " carets: document.querySelectorAll('.caret').length })"
        ),
    )
    assert shown == {"self": 1, "carets": 0}
