"""WebSocket fuzzing: hand-built frames over a raw socket after a real upgrade.

Random opcodes, fragmentation (with control frames between fragments),
masks (and unmasked frames), declared lengths that lie, RSV bits, invalid
UTF-8 in text frames, msgpack garbage and bombs (huge declared lengths, deep
nesting, extension types, non-string keys), and messages and ops of every
wrong shape. After every case: each server frame well formed, no ``internal``
error, a valid close code, the connection closed once we close, nothing in
the log, and a healthy client served at once.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ADMIN
from tests.fuzz.conftest import FuzzTarget
from tests.fuzz.strategies import ws_frames
from tests.fuzz.support import (
    check_healthy,
    check_ws_transcript,
    examples,
    parse_server_frames,
    ws_case,
)

SETTINGS = settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


def test_ws_fuzz(fuzz_target: FuzzTarget) -> None:
    port = fuzz_target.port
    logs = fuzz_target.logs
    logs.take()
    seen: Counter[object] = Counter()

    @SETTINGS
    @given(data=st.data())
    def case(data: st.DataObject) -> None:
        token = data.draw(st.sampled_from([ADMIN, fuzz_target.token]), label="token")
        frames, honest = data.draw(ws_frames(), label="frames")
        transcript = parse_server_frames(ws_case(port, token, frames, sync=honest))
        for message in check_ws_transcript(transcript):
            seen[f"{message['kind']} {message.get('error', '')}".strip()] += 1
        closes = [f.payload[:2] for f in transcript.frames if f.opcode == 0x8]
        seen[f"close {int.from_bytes(closes[0], 'big') if closes and closes[0] else None}"] += 1
        problems = logs.take()
        assert not problems, problems
        check_healthy(port)

    case()
    print(f"{fuzz_target.parser}: {sorted(seen.items(), key=str)}")  # shown with -s
