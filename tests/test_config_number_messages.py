"""The one line that refuses a number setting: the largest memory budget
was shown rounded ("at most 1.67772e+07", where 16777216 is taken), and a
value with a newline around it (an env file's stray line break) split the
line in two."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env


def test_the_memory_budget_limit_is_shown_exactly() -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_MEMORY_BUDGET_MB": "16777217"})
    assert str(info.value) == ("SERVICE_MEMORY_BUDGET_MB: must be at most 16777216, got 16777217")


@pytest.mark.parametrize("value", ["\n-1", "-1\n", " nan\n", "\ninf"])
def test_a_value_with_line_breaks_around_it_is_refused_in_one_line(
    value: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            "PATH": "/usr/bin:/bin",
            "SERVICE_WS_PING_S": value,
            "SERVICE_DATA_DIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("syncd: SERVICE_WS_PING_S: must be "), proc.stderr
