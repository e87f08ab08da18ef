"""The report: rows as table cells, generator notes, and perf/RESULTS.md's sections."""

from __future__ import annotations

import dataclasses

from perf.suite.report import Row, console_table, gen_note, markdown_table, results_markdown


def test_markdown_table_escapes_pipes() -> None:
    table = markdown_table([Row("a|b", "1/s", target=">= 2x")])
    assert table.splitlines()[2] == "| a\\|b | 1/s |  |  |  | >= 2x |  |  |"


def test_a_saturated_generator_is_marked() -> None:
    assert gen_note("loadgen", 0.45) == "loadgen 45%"
    assert gen_note("loadgen", 0.45, 0.95) == "loadgen 45% / 95% SATURATED"
    assert gen_note("n/a") == "n/a"


def test_results_markdown_has_the_machine_the_rows_and_the_failures() -> None:
    report = {
        "command": "python -m perf",
        "started": "2026-01-01 00:00",
        "commit": "abc1234",
        "seconds": 300.0,
        "machine": {
            "cpu": "Test CPU",
            "cores": 2,
            "memory_gib": 4.0,
            "kernel": "Linux 6",
            "python": "3.11.7",
            "wrk": None,
            "server_core": "0",
            "load_core": "1",
        },
        "load_start": "0.1 0.2 0.3",
        "load_end": "1.0 1.1 1.2",
        "cpu_index_start": 3.7,
        "cpu_index_end": None,
        "rows": [dataclasses.asdict(Row("WS ingest", "16,224/s", target=">= 20,000/s", met="NO"))],
        "errors": {"pg": "RuntimeError: no"},
    }
    md = results_markdown(report)
    assert "run took 5.0 minutes" in md
    assert "wrk: not installed" in md
    assert "at the start: 3.70; at the end: not measured" in md
    assert "| WS ingest | 16,224/s |  |  |  | >= 20,000/s | NO |  |" in md
    assert md.endswith("## Failures\n\n- `pg`: RuntimeError: no\n")
    assert console_table([Row("w", "1")]).splitlines()[0].startswith("workload  syncd")
