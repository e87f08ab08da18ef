"""systemd/syncd.service's start limit: a start that keeps failing with an
exit 1 (one a restart might have cured, but did not) is given up, the unit
failed with its error in ``systemctl status``; a node that crashes after
serving a while is restarted every time. Restart=on-failure with RestartSec=2
under systemd's default limit (5 starts in 10 s) restarted a failing start
for ever: 5 restarts 2 s apart, each start a second or more, take longer."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((ROOT / "systemd" / "syncd.service").read_text())
    return parser


FAILING_START_S = 10.0
"""How long a start that fails may take and still count as a crash loop (the
imports, reading the settings, opening the store)."""
LONG_RUN_S = 60.0
"""A node that crashes after serving this long is restarted, every time."""


def test_the_unit_stops_a_crash_loop_but_not_a_node_that_ran() -> None:
    """Starts RestartSec apart, each failing at once: systemd's default start
    limit (5 in 10 s) was never reached, as 5 starts took over 10 s. The
    unit's limit is reached by starts that fail within FAILING_START_S, and
    never by a node that crashes after LONG_RUN_S of serving."""
    config = unit()
    restart_s = float(config["Service"]["RestartSec"])
    interval_s = float(config["Unit"]["StartLimitIntervalSec"])
    burst = int(config["Unit"]["StartLimitBurst"])
    assert "StartLimitIntervalSec" not in config["Service"]  # systemd reads it in [Unit]

    def refused_start_at(run_s: float) -> float:
        """Seconds from the first start to the one past the burst (the one
        systemd refuses if it comes within the interval), each life ``run_s``."""
        return burst * (restart_s + run_s)

    assert refused_start_at(FAILING_START_S) < interval_s
    assert refused_start_at(LONG_RUN_S) > interval_s
    assert config["Service"]["Restart"] == "on-failure"
    assert "2" in config["Service"]["RestartPreventExitStatus"].split()
