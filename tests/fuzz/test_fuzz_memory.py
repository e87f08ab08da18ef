"""The fuzzers against a real subprocess: its memory stays flat and its log clean.

One server process takes a warm-up run of mixed HTTP and WebSocket fuzz cases,
then a longer run; its resident memory after the second run may exceed the
first by at most ``RSS_GROWTH_BOUND`` (a leak of even a few hundred bytes per
case would show), and its whole log (level debug) holds no traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ADMIN, Subprocess
from tests.fuzz.conftest import mint
from tests.fuzz.strategies import FUZZ_MAX_BODY, http_request, ws_frames
from tests.fuzz.support import (
    FUZZ_RATE_LIMIT,
    check_healthy,
    check_response,
    check_ws_transcript,
    examples,
    http_exchange,
    parse_responses,
    parse_server_frames,
    rss_bytes,
    ws_case,
)

RSS_GROWTH_BOUND = 12 * 1024 * 1024
"""Growth allowed between the two measurements: the CRDTs the cases create
(a small pool of ids) and allocator slack, far below what a per-case leak of
the second run's size would add."""
WARMUP = 200
RUN = 400


def run_cases(port: int, count: int) -> None:
    token = mint()

    @settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(data=st.data())
    def case(data: st.DataObject) -> None:
        if data.draw(st.booleans(), label="websocket"):
            frames, honest = data.draw(ws_frames(), label="frames")
            ws_token = data.draw(st.sampled_from([ADMIN, token]), label="token")
            check_ws_transcript(parse_server_frames(ws_case(port, ws_token, frames, sync=honest)))
        else:
            raw, methods = data.draw(http_request(token), label="request")
            for response in parse_responses(http_exchange(port, raw), methods):
                check_response(response)

    case()


def settled_rss(pid: int) -> int:
    """RSS once the server is idle (the last connections have been closed)."""
    time.sleep(0.3)
    return rss_bytes(pid)


def test_memory_is_flat_and_log_clean_over_a_fuzz_run(
    spawn_server: Callable[..., Subprocess],
) -> None:
    server = spawn_server(
        {
            "SERVICE_RATE_LIMIT": str(FUZZ_RATE_LIMIT),
            "SERVICE_MAX_BODY_BYTES": str(FUZZ_MAX_BODY),
            "SERVICE_DEMO": "true",
            "SERVICE_CORS_ORIGINS": "https://ok.example",
            "SERVICE_LOG_LEVEL": "debug",
        }
    )
    pid = server.proc.pid
    run_cases(server.port, examples(WARMUP))
    before = settled_rss(pid)
    run_cases(server.port, examples(RUN))
    after = settled_rss(pid)
    print(f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")  # shown with -s
    check_healthy(server.port)
    assert after - before <= RSS_GROWTH_BOUND, (
        f"RSS grew by {(after - before) / 2**20:.1f} MiB over {examples(RUN)} cases "
        f"({before / 2**20:.1f} -> {after / 2**20:.1f} MiB)"
    )
    assert server.terminate() == 0
    log: Any = server.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:3000]
    assert " ERROR " not in log and " CRITICAL " not in log
