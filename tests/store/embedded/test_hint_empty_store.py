"""A clean stop of a store that never wrote a history frame leaves a hint the
next start uses without complaint (it named a history segment that was never
created, and every start after such a stop warned that it was gone)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.store.embedded.hint import HINT_NAME
from tests.conftest import ADMIN

AUTH = {"authorization": f"Bearer {ADMIN}"}


async def test_a_clean_stop_with_no_history_yet_leaves_a_hint_the_next_start_uses(
    make_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "empty"
    first = await make_server(data_dir=data)
    await first.server.shutdown()
    assert (data / "history" / HINT_NAME).exists()
    assert not list((data / "history").glob("*.hist"))

    with caplog.at_level(logging.WARNING, logger="syncd.store"):
        again = await make_server(data_dir=data)
    assert [r.getMessage() for r in caplog.records if r.name == "syncd.store"] == []
    async with httpx.AsyncClient(base_url=again.url, headers=AUTH) as client:
        r = await client.post("/v1/namespaces/n/crdts/gc:a/ops", json={"op": "increment"})
        assert r.status_code == 200
        assert (await client.get("/v1/namespaces/n/crdts/gc:a")).json()["value"] == 1
