"""The blocking ``Client.subscribe`` / ``events`` raise bad arguments (no
ids, an unknown option) when called, as ``AsyncClient`` does, instead of
returning a stream whose first ``next()`` raises them; good ones still stream
from the real server."""

from __future__ import annotations

import asyncio
import threading

import pytest

from syncd.client import Client
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer


async def test_bad_stream_arguments_raise_at_the_call(server: RunningServer) -> None:
    def run() -> None:
        threads = threading.active_count()
        with Client(server.url, make_token(3), NS) as client:
            client.gcounter_increment("gc:s")
            with pytest.raises(ValueError, match="at least one id"):
                client.subscribe([])
            with pytest.raises(TypeError, match="bogus"):
                client.subscribe(["gc:s"], bogus=1)
            with pytest.raises(TypeError, match="bogus"):
                client.events("gc:s", bogus=1)
            assert threading.active_count() == threads  # no stream thread left behind
            with client.events("gc:s", backoff_max_s=1.0) as stream:
                assert stream.next(timeout=5)["seq"] == 1

    await asyncio.to_thread(run)
