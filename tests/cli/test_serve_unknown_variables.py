"""A SERVICE_* variable that is no setting (a typo: SERVICE_DATADIR) was
ignored without a word, leaving the default it meant to change in force.
``syncd serve`` now warns once per such name, with the setting it most likely
misspells, and serves as before (a warning, not a refusal)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from syncd.config import VARIABLES, unknown_variables

ROOT = Path(__file__).resolve().parents[2]


def test_a_misspelt_setting_is_one_warning_naming_the_right_one(
    spawn_server: Any, tmp_path: Path
) -> None:
    server = spawn_server(
        {
            "SERVICE_DATADIR": str(tmp_path / "elsewhere"),
            "SERVICE_RATELIMIT": "5",
            "service_log_level": "debug",
            "SERVICE_ZZZ": "s3cret-value",
        }
    )
    assert httpx.get(f"{server.url}/health/live", timeout=5).status_code == 200
    assert server.terminate() == 0
    log = server.log()
    warned = re.findall(r"WARNING syncd: (.*)", log)
    assert (
        "SERVICE_DATADIR is not a syncd setting and is ignored (did you mean SERVICE_DATA_DIR?)"
        in warned
    )
    assert (
        "SERVICE_RATELIMIT is not a syncd setting and is ignored (did you mean SERVICE_RATE_LIMIT?)"
        in warned
    )
    assert (
        "service_log_level is not a syncd setting and is ignored (did you mean SERVICE_LOG_LEVEL?)"
        in warned
    )
    assert "SERVICE_ZZZ is not a syncd setting and is ignored" in warned
    assert "s3cret-value" not in log  # names only, never values
    assert not (tmp_path / "elsewhere").exists()


def test_known_variables_and_others_are_not_warned_about() -> None:
    env = {name: "x" for name in VARIABLES} | {"PATH": "/bin", "DATABASE_URI": "x", "HOME": "/"}
    assert unknown_variables(env) == []


def test_the_known_variables_are_those_the_settings_read_and_the_docs_list() -> None:
    source = (ROOT / "syncd" / "config.py").read_text()
    listed = source.index("VARIABLES: frozenset[str]")
    rest = source[:listed] + source[source.index('"""Every variable', listed) :]
    read = set(re.findall(r'"(SERVICE_[A-Z0-9_]+|DATABASE_URL)"', rest))
    assert read == VARIABLES, (sorted(read - VARIABLES), sorted(VARIABLES - read))
    documented = set(
        re.findall(
            r"^\| `((?:SERVICE_|DATABASE_URL)[A-Z0-9_]*)` \|",
            (ROOT / "docs" / "configuration.md").read_text(),
            re.M,
        )
    )
    assert documented == VARIABLES, (sorted(documented - VARIABLES), sorted(VARIABLES - documented))
