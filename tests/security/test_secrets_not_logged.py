"""The admin secret, tokens, the signing key and the webhook secret never
appear in the log, even at debug level, through a session of requests that
includes every kind of failure: wrong admin secrets, tampered, expired,
foreign and rate-limited tokens, tokens in query strings (WebSocket and SSE),
malformed requests carrying a token, WebSocket errors and protocol
violations, and webhook deliveries that fail.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from tests.conftest import SIGNING_KEY_HEX, Subprocess, free_port
from tests.fuzz.support import (
    check_ws_transcript,
    client_frame,
    http_exchange,
    open_ws,
    parse_responses,
    parse_server_frames,
    pump,
    ws_case,
)

ADMIN = "adm-" + secrets.token_urlsafe(32)
WEBHOOK_SECRET = "whsec-" + secrets.token_urlsafe(24)
URL_PATH_KEY = "urlpath-" + secrets.token_hex(8)
URL_QUERY_KEY = "urlkey-" + secrets.token_hex(8)
"""Secrets a webhook URL may carry in its path (Slack-style) and query."""


def call(
    port: int, method: str, path: str, bearer: str | None = None, body: object = None
) -> tuple[int, dict[str, Any]]:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\n"
    if bearer is not None:
        head += f"Authorization: Bearer {bearer}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    (response,) = parse_responses(http_exchange(port, head.encode() + b"\r\n" + data), [method])
    return response.status, json.loads(response.body) if response.body else {}


def issue(port: int, body: dict[str, Any], bearer: str = ADMIN, ns: str = "app") -> str:
    status, answer = call(port, "POST", f"/v1/namespaces/{ns}/tokens", bearer, body)
    assert status == 200, answer
    return str(answer["token"])


def session(port: int) -> list[str]:
    """Drive the server through successes and failures; returns every token used."""
    v1 = issue(port, {"client_id": 7, "permissions": {"read": ["*"], "write": ["*"]}})
    ns_admin = issue(
        port, {"client_id": 8, "permissions": {"read": [], "write": [], "admin": True}}
    )
    by_ns_admin = issue(
        port, {"client_id": 9, "permissions": {"read": ["*"], "write": []}}, ns_admin
    )
    v2 = issue(
        port, {"client_id": 10, "rules": {"r": [{"p": "*"}], "w": [{"p": "gc:*", "o": 1}], "rl": 2}}
    )
    short = issue(port, {"client_id": 11, "permissions": {"read": ["*"], "write": []}, "ttl_ms": 1})
    other = issue(
        port, {"client_id": 12, "permissions": {"read": ["*"], "write": ["*"]}}, ns="other"
    )
    payload, signature = v1.split(".")
    tampered = payload + "." + ("A" if signature[0] != "A" else "B") + signature[1:]
    time.sleep(0.01)  # the short-lived one expires
    # Successes
    assert (
        call(port, "POST", "/v1/namespaces/app/crdts/gc:s/ops", v1, {"op": "increment"})[0] == 200
    )
    assert call(port, "GET", "/v1/namespaces/app/tokens/me", v2)[0] == 200
    assert call(port, "GET", "/v1/namespaces/app/crdts/gc:s", by_ns_admin)[0] == 200
    # Failures of every kind
    for bearer in (
        ADMIN + "x",
        ADMIN[:-1],
        ADMIN.upper(),
        tampered,
        short,
        other,
        "garbage." + signature,
    ):
        assert call(port, "GET", "/v1/namespaces/app/crdts/gc:s", bearer)[0] in (401, 403)
    for _ in range(3):  # v2's rl is 2
        call(port, "GET", "/v1/namespaces/app/crdts/gc:s", v2)
    assert call(port, "POST", "/v1/namespaces/app/crdts/pn:s/ops", v1, {"op": "nope"})[0] == 400
    assert (
        call(port, "POST", "/v1/namespaces/app/tokens", v1, {"client_id": 1, "permissions": {}})[0]
        == 403
    )
    assert call(port, "POST", "/v1/namespaces/app/tokens", ADMIN, {"client_id": -1})[0] == 400
    # Tokens in query strings: WebSocket (good and bad) and SSE
    for token in (v1, tampered, ADMIN, short):
        quoted = urllib.parse.quote(token, safe="")
        http_exchange(
            port, f"GET /v1/namespaces/app/ws?token={quoted} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        )
        http_exchange(
            port,
            f"GET /v1/namespaces/app/crdts/gc:s/events?token={quoted} HTTP/1.1\r\nHost: t\r\n\r\n".encode(),
        )
    # Malformed requests that carry a token
    for token in (v1, ADMIN):
        http_exchange(
            port, f"GET /x?token={token} HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n".encode()
        )
        http_exchange(port, f"GET /\x00?token={token} HTTP/1.1\r\n\r\n".encode())
        http_exchange(
            port, f"GET / HTTP/1.1\r\nAuthorization: Bearer {token}\r\nX: \x00\r\n\r\n".encode()
        )
    # WebSocket: errors, a good op (a webhook event), a protocol violation
    frames = b"".join(
        client_frame(0x2, msgpack.packb(message))
        for message in (
            {"kind": "op", "id": "gc:w", "op": {"op": "increment"}, "ref": 1},
            {"kind": "op", "id": "gc:w", "op": {"op": "bad"}, "ref": 2},
            {"kind": "subscribe", "id": "../x", "ref": 3},
            {"kind": "nope", "token": v1},
        )
    )
    check_ws_transcript(parse_server_frames(ws_case(port, v1, frames, sync=True)))
    sock, _ = open_ws(port, quoted_token(v1))
    with sock:
        pump(sock, client_frame(0x1, b"\xff\xfe", mask=b"abcd") + client_frame(0x3, v1.encode()))
    return [v1, ns_admin, by_ns_admin, v2, short, other, tampered]


def quoted_token(token: str) -> str:
    return urllib.parse.quote(token, safe="")


def test_no_secret_or_token_in_a_debug_log(spawn_server: Callable[..., Subprocess]) -> None:
    dead = free_port()  # nothing listens: every webhook delivery fails
    server = spawn_server(
        {
            "SERVICE_ADMIN_TOKEN": ADMIN,
            "SERVICE_LOG_LEVEL": "debug",
            "SERVICE_WEBHOOK_URL": (
                f"http://127.0.0.1:{dead}/services/{URL_PATH_KEY}?key={URL_QUERY_KEY}"
            ),
            "SERVICE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        }
    )
    tokens = session(server.port)
    time.sleep(0.5)  # webhook retries get logged
    with socket.create_connection(("127.0.0.1", server.port)):
        pass
    assert server.terminate() == 0
    log = server.log()
    assert "DEBUG" in log, "the server did not log at debug level"
    assert "webhook" in log.lower(), "the webhook failures were not logged at all"
    secrets_seen = {
        "admin secret": ADMIN,
        "webhook secret": WEBHOOK_SECRET,
        "webhook URL path key": URL_PATH_KEY,
        "webhook URL query key": URL_QUERY_KEY,
        "signing key": SIGNING_KEY_HEX,
        **{f"token {i}": token for i, token in enumerate(tokens)},
        **{f"token {i} signature": token.split(".")[1] for i, token in enumerate(tokens)},
        **{f"token {i} (quoted)": quoted_token(token) for i, token in enumerate(tokens)},
    }
    leaked = [name for name, value in secrets_seen.items() if value in log]
    assert leaked == [], leaked
    # The admin secret's prefix (what a truncating logger might print) is absent too.
    assert ADMIN[:12] not in log


def test_webhook_url_with_credentials_stops_the_start_in_one_line(tmp_path: Path) -> None:
    """Bug: a webhook URL with user:password@ passed the configuration check
    and then failed inside the dispatcher at start: a traceback and exit 1
    instead of the one line naming the variable. The password is not echoed."""
    password = "pw-" + secrets.token_hex(8)
    result = subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            **os.environ,
            "SERVICE_BIND": f"127.0.0.1:{free_port()}",
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_WEBHOOK_URL": f"https://hook:{password}@example.invalid/hook",
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "SERVICE_WEBHOOK_URL" in lines[0], output
    assert password not in output
