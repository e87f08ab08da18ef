"""HTTP fuzzing against the running server, with both parsers.

Random methods, paths (percent-encodings, traversal shapes, over-long
segments), query strings, headers, framings (exact, chunked, lying lengths,
pipelines) and bodies (JSON of every shape, deep nesting, huge numbers,
invalid UTF-8, duplicate keys, lone surrogates). After every case: no 500,
every error body of the one shape, nothing in the log, and a healthy client is
served at once.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import FuzzTarget
from tests.fuzz.strategies import http_request
from tests.fuzz.support import (
    check_healthy,
    check_response,
    examples,
    http_exchange,
    parse_responses,
)

SETTINGS = settings(
    max_examples=examples(400),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


def test_http_fuzz(fuzz_target: FuzzTarget) -> None:
    port = fuzz_target.port
    logs = fuzz_target.logs
    logs.take()
    seen: Counter[object] = Counter()

    @SETTINGS
    @given(data=st.data())
    def case(data: st.DataObject) -> None:
        raw, methods = data.draw(http_request(fuzz_target.token), label="request")
        received = http_exchange(port, raw)
        for response in parse_responses(received, methods):
            check_response(response)
            seen[response.status] += 1
        problems = logs.take()
        assert not problems, problems
        check_healthy(port)

    case()
    print(f"{fuzz_target.parser}: {sorted(seen.items(), key=str)}")  # shown with -s
