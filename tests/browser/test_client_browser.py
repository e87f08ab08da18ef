"""The bundled JS client inside Chromium: cross-origin HTTP and SSE under the
server's CORS policy (a page from http://localhost:P calling
http://127.0.0.1:P is cross-origin), and refused without it."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from tests.browser.conftest import Browser
from tests.conftest import ADMIN, Subprocess, free_port

# Runs in the page: HTTP ops, a read and an SSE stream against `api`.
SCRIPT = """
async ([api, transport]) => {
  const m = await import('/demo/syncd-client.js');
  const { token } = await (await fetch('/demo/token')).json();
  const client = new m.SyncdClient({ baseUrl: api, token, namespace: 'demo' });
  try {
    const stream = client.events('pn:demo-counter-cors-' + transport, { transport });
    const sub = stream.subscription;
    const answer = await client.increment('pn:demo-counter-cors-' + transport, 2);
    const read = await client.read('pn:demo-counter-cors-' + transport);
    const deadline = Date.now() + 5000;
    while (sub.value() !== 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    stream.close();
    return { seq: answer.seq, value: read.value, streamed: sub.value(), transport: stream.transport };
  } catch (err) {
    return { error: String(err.name + ': ' + err.message) };
  }
}
"""


def start(demo_env: Callable[..., Subprocess], cors: str | None) -> Subprocess:
    port = free_port()
    env = {"SERVICE_DEMO": "true"}
    if cors is not None:
        env["SERVICE_CORS_ORIGINS"] = cors.format(port=port)
    return demo_env(env, port=port)


def run(browser: Browser, server: Subprocess, transport: str) -> dict[str, object]:
    browser.call("open", page="p", url=f"http://localhost:{server.port}/demo/?room=c")
    js = f"({SCRIPT})({json.dumps([server.url, transport])})"
    result: dict[str, object] = browser.call("eval", page="p", js=js)
    return result


def test_cross_origin_calls_work_with_the_origin_allowed(
    browser: Browser, spawn_server: Callable[..., Subprocess]
) -> None:
    server = start(spawn_server, "https://elsewhere.example, http://localhost:{port}")
    result = run(browser, server, "fetch")
    assert result == {"seq": 1, "value": 2, "streamed": 2, "transport": "fetch"}


@pytest.mark.parametrize("cors", [None, "http://localhost:1"])
def test_cross_origin_calls_are_refused_otherwise(
    browser: Browser, spawn_server: Callable[..., Subprocess], cors: str | None
) -> None:
    server = start(spawn_server, cors)
    result = run(browser, server, "fetch")
    # The browser refuses the preflight; the client names what failed.
    error = result["error"]
    assert error.startswith("SyncdError: the service could not be reached: POST "), result
    assert error.endswith(": Failed to fetch"), result
    # Nothing reached the CRDT: the preflight stopped the POST.
    r = httpx.get(
        f"{server.url}/v1/namespaces/demo/crdts/pn:demo-counter-cors-fetch",
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 404


def test_event_source_transport(browser: Browser, spawn_server: Callable[..., Subprocess]) -> None:
    server = start(spawn_server, "*")
    token = httpx.get(f"{server.url}/demo/token").json()["token"]
    with httpx.stream(
        "GET",
        f"{server.url}/v1/namespaces/demo/crdts/pn:demo-counter-probe/events",
        params={"token": token},
        headers={"accept": "text/event-stream"},
    ) as probe:
        status = probe.status_code
    if status == 401:
        pytest.skip("this server does not take ?token= on /events, which EventSource needs")
    result = run(browser, server, "eventsource")
    assert result == {"seq": 1, "value": 2, "streamed": 2, "transport": "eventsource"}
