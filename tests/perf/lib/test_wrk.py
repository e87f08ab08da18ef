"""perf.lib.wrk reads what wrk prints, and writes the request wrk sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.lib.wrk import parse_wrk, wrk_lua

WRK_OUTPUT = """\
Running 5s test @ http://127.0.0.1:40000/health/live
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.05ms  312.00us   9.80ms   91.00%
    Req/Sec    30.51k     1.20k   32.10k    80.00%
  Latency Distribution
     50%  990.00us
     75%    1.10ms
     90%    1.30ms
     99%    2.50ms
  151800 requests in 5.00s, 20.27MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  30360.12
Transfer/sec:      4.05MB
"""


def test_parse_wrk_reads_rate_latency_and_errors() -> None:
    r = parse_wrk(WRK_OUTPUT)
    assert r["rps"] == pytest.approx(30360.12)
    assert r["p50_ms"] == pytest.approx(0.99)
    assert r["p99_ms"] == pytest.approx(2.5)
    assert r["non_2xx"] == 7
    assert r["socket_errors"] == 3
    assert r["requests"] == 151800  # what a server's CPU is divided by


def test_parse_wrk_without_a_rate_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="Requests/sec"):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_parse_wrk_refuses_a_latency_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="wrk latency"):
        parse_wrk(WRK_OUTPUT.replace("2.50ms", "2.50ns"))


def test_wrk_lua_carries_method_body_and_headers(tmp_path: Path) -> None:
    script = tmp_path / "r.lua"
    wrk_lua(script, "POST", '{"op":"increment"}', ["authorization: Bearer a:b"])
    assert script.read_text().splitlines() == [
        'wrk.method = "POST"',
        'wrk.body = [==[{"op":"increment"}]==]',
        'wrk.headers["Content-Type"] = "application/json"',
        'wrk.headers["authorization"] = [==[Bearer a:b]==]',
    ]
