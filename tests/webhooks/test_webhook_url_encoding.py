"""A SERVICE_WEBHOOK_URL that is not plain ASCII: a non-ASCII path or query is
percent-encoded (UTF-8), an internationalized host goes out in its IDNA form,
and a control character is refused at start. Before, such a URL was accepted at
start and every event then failed to encode (UnicodeEncodeError or h11's
'Illegal target characters'), was retried and dropped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.webhooks import client
from tests.http.support import issue, op
from tests.webhooks.webhook_receiver import Receiver


async def test_a_non_ascii_path_and_query_are_delivered_percent_encoded(
    make_server: Any, make_receiver: Any
) -> None:
    receiver: Receiver = await make_receiver(secret="s")
    url = receiver.url_for("127.0.0.1", "/hoöks/ünïcode?team=café")
    srv = await make_server(webhook_url=url, webhook_secret="s")
    async with httpx.AsyncClient(base_url=srv.url) as http:
        h = await issue(http)
        r = await op(http, h, "gc:n", {"op": "increment", "amount": 1})
        assert r.status_code == 200
        await receiver.wait_for(1)
    (req,) = receiver.requests
    assert req.target == "/ho%C3%B6ks/%C3%BCn%C3%AFcode?team=caf%C3%A9"
    assert req.signature_ok and req.json()["crdt_id"] == "gc:n"


async def test_an_internationalized_host_is_sent_in_idna_form() -> None:
    target = client.parse_url("http://bücher.example:8080/hook")
    assert target.host == "xn--bcher-kva.example"
    assert target.host_header == "xn--bcher-kva.example:8080"
    request = client.build_request(client.new_connection(), target, b"{}", [])
    assert b"\r\nHost: xn--bcher-kva.example:8080\r\n" in request


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/a\x00b", "http://127.0.0.1:9/a\x7fb"])
def test_a_control_character_stops_the_start(url: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
        "SERVICE_BIND": "127.0.0.1:0",
        "SERVICE_WEBHOOK_URL": url.replace("\x00", "\x01"),  # an env value cannot hold NUL
    }
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.startswith("syncd: SERVICE_WEBHOOK_URL: ")
        and "control character" in done.stderr
    )
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("url", "words"),
    [
        # Found by probing: accepted at start, then every event failed its
        # host lookup ("Name or service not known"), was retried and dropped.
        ("http://127.0.0.1 x:9/hook", "whitespace in its host"),
        # Found by probing: refused, but with a codec's message about '\udcff'.
        (os.fsdecode(b"http://127.0.0.1:9/ho\xffk"), "not valid UTF-8"),
    ],
)
def test_a_host_with_whitespace_or_a_url_not_utf8_stops_the_start(
    url: str, words: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
        "SERVICE_BIND": "127.0.0.1:0",
        "SERVICE_WEBHOOK_URL": url,  # subprocess passes the bytes it stands for
    }
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "serve"],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("syncd: SERVICE_WEBHOOK_URL: ") and words in done.stderr
    assert done.stderr.count("\n") == 1
