"""The documented defaults are the real ones: setting a variable to the
default its row gives (in docs/configuration.md or the README's table)
changes nothing in the settings; a row that says unset or random leaves the
setting empty or random; and the Settings class's own defaults are those
of an empty environment."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from syncd.config import VARIABLES, Settings, from_env

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `((?:SERVICE_|DATABASE_URL)[A-Z0-9_]*)` \| ([^|]*) \|", re.M)
PAGES = ("docs/configuration.md", "README.md")
ROWS = {page: dict(ROW.findall((ROOT / page).read_text())) for page in PAGES}
FIXED = {"SERVICE_NODE_ID": "fixed"}
"""The node id is random per start unless set: the same in both compared."""


def written_default(cell: str) -> str | None:
    """The value a default cell gives in backticks first, or None (unset, random...)."""
    found = re.match(r"`([^`]*)`", cell.strip())
    return found.group(1) if found else None


def rows(*, written: bool) -> list[tuple[str, str, str]]:
    return [
        (page, name, cell)
        for page, found in ROWS.items()
        for name, cell in sorted(found.items())
        if (written_default(cell) is not None) == written
    ]


def test_the_reference_has_a_row_for_every_variable() -> None:
    assert set(ROWS["docs/configuration.md"]) == VARIABLES
    assert set(ROWS["README.md"]) <= VARIABLES


@pytest.mark.parametrize(("page", "name", "cell"), rows(written=True))
def test_setting_the_documented_default_changes_nothing(page: str, name: str, cell: str) -> None:
    value = written_default(cell)
    assert value is not None
    unset = from_env(FIXED)
    try:
        given = from_env({**FIXED, name: value})
    except ValueError as exc:
        pytest.fail(f"{page}: {name}: the documented default {value!r} is refused: {exc}")
    changed = [f.name for f in fields(Settings) if getattr(unset, f.name) != getattr(given, f.name)]
    assert not changed, f"{page}: {name}={value!r} (its documented default) changes {changed}"


@pytest.mark.parametrize(("page", "name", "cell"), rows(written=False))
def test_a_default_written_in_words_is_unset_or_random(page: str, name: str, cell: str) -> None:
    assert re.match(r"(unset|random)\b", cell.strip()), f"{page}: {name}: default {cell!r}"
    if name in ("SERVICE_NODE_ID", "SERVICE_SIGNING_KEY"):
        return  # random per start: tests/test_config.py
    # Unset, or (the admin token) made at the start: nothing in the settings.
    field = {
        "DATABASE_URL": "database_url",
        "SERVICE_PREVIOUS_SIGNING_KEYS": "previous_signing_keys",
    }.get(name, name.removeprefix("SERVICE_").lower())
    assert not getattr(from_env(FIXED), field), f"{page}: {name} is documented as unset"


def test_the_settings_class_defaults_are_an_empty_environment() -> None:
    assert Settings(node_id="fixed") == from_env(FIXED)
