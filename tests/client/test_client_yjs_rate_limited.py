"""A YjsProvider whose handshake is refused 429 ``rate_limited`` (the
token's rate limit, docs/permissions.md#rate-limits) waits the answer's
Retry-After before knocking again, and once it is in, ``refused`` is None:
it names a refusal that stopped the provider, not one it got past."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pycrdt import Doc, Text

from syncd.client import AsyncClient, yjs
from syncd.client.yjs import YjsProvider
from tests.client.conftest import NS, limited_token
from tests.conftest import RunningServer


async def test_a_rate_limited_handshake_waits_and_is_not_left_refused(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[float] = []
    real_connect = yjs.connect

    def counting_connect(*args: Any, **kwargs: Any) -> Any:
        attempts.append(time.monotonic())
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(yjs, "connect", counting_connect)
    token = limited_token()
    async with AsyncClient(server.url, token, NS) as client:
        await client.gcounter_increment("gc:rl-yjs")  # the one request of this second
    doc: Doc = Doc()
    async with YjsProvider(server.url, NS, "rl-notes", doc, token) as provider:
        await asyncio.wait_for(provider.synced.wait(), 5)
        doc.get("content", type=Text).insert(0, "x")
        assert provider.refused is None
    # Refused once, then in at the Retry-After (whole seconds, at least 1);
    # before: five knocks at 0.1, 0.2, 0.4, 0.8 s, refused 429 left set.
    assert len(attempts) == 2, [round(t - attempts[0], 2) for t in attempts]
    assert attempts[1] - attempts[0] >= 0.99
