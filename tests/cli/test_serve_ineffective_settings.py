"""A setting that does nothing without another (SERVICE_WAL_CONNSTR without
DATABASE_URL, SERVICE_WEBHOOK_SECRET without SERVICE_WEBHOOK_URL) was
ignored without a word: an operator who meant to turn on the WAL stream or
signed webhooks, and misspelt or forgot the other variable, was never told.
syncd serve now warns once for each, naming what is missing (never a value),
and serves as before."""

from __future__ import annotations

import re
from typing import Any

import httpx

from syncd.config import ineffective_variables


def test_each_ineffective_setting_is_one_warning(spawn_server: Any) -> None:
    server = spawn_server(
        {
            "SERVICE_WAL_CONNSTR": "postgresql://repl:wal-s3cret@127.0.0.1:9/db",
            "SERVICE_WAL_SLOT": "my_slot",
            "SERVICE_WEBHOOK_SECRET": "hook-s3cret",
        }
    )
    assert httpx.get(f"{server.url}/health/live", timeout=5).status_code == 200
    assert server.terminate() == 0
    log = server.log()
    warned = re.findall(r"WARNING syncd: (.*)", log)
    assert (
        "SERVICE_WAL_CONNSTR is set but ignored: DATABASE_URL is not"
        " (there is no WAL stream without a database)" in warned
    ), warned
    assert (
        "SERVICE_WAL_SLOT is set but ignored: SERVICE_WAL_CONNSTR is not" not in log
    )  # it is set, if to no effect: one warning is enough
    assert (
        "SERVICE_WEBHOOK_SECRET is set but ignored: SERVICE_WEBHOOK_URL is not"
        " (it signs the webhook's requests)" in warned
    ), warned
    assert "s3cret" not in log


def test_settings_that_go_together_are_not_warned_about() -> None:
    assert not ineffective_variables(
        {
            "DATABASE_URL": "postgresql://db/x",
            "SERVICE_WAL_CONNSTR": "postgresql://db/x",
            "SERVICE_WAL_SLOT": "s",
            "SERVICE_WAL_PUB": "p",
            "SERVICE_WEBHOOK_URL": "https://hooks.example/in",
            "SERVICE_WEBHOOK_SECRET": "k",
        }
    )
    assert ineffective_variables({"SERVICE_WAL_PUB": "p"}) == [
        "SERVICE_WAL_PUB is set but ignored: SERVICE_WAL_CONNSTR is not"
        " (it names the WAL stream's publication)"
    ]
    assert not ineffective_variables({"SERVICE_WEBHOOK_SECRET": ""})  # empty: unset
