"""MAX_SEQ_DIGITS at its edge on a real event stream: a ``since`` of that many
digits is taken (leading zeros and all), one significant digit more is 400
bad_request before any stream starts."""

from __future__ import annotations

import httpx

from syncd.http.handlers.events import MAX_SEQ_DIGITS
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS
from tests.http.test_events import SseReader

PATH = "/v1/namespaces/app/crdts/gc:digits/events"


async def test_a_since_of_max_seq_digits_is_taken_one_more_digit_is_400(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as client:
        for _ in range(3):
            r = await client.post(f"{PATH.removesuffix('/events')}/ops", json={"op": "increment"})
            assert r.status_code == 200
        epoch = (await client.get(PATH.removesuffix("/events"))).json()["epoch"]
        # 2 with leading zeros: the replay holds the one op after it
        since = "2".zfill(MAX_SEQ_DIGITS)
        sse, status, _ = await SseReader.open(
            server.port, f"{PATH}?since={since}&epoch={epoch}", ADMIN_HEADERS
        )
        assert status == 200
        event = await sse.event()
        assert event["kind"] == "op" and event["seq"] == 3
        sse.writer.close()
        largest = "9" * MAX_SEQ_DIGITS  # past any seq: a snapshot
        sse, status, _ = await SseReader.open(server.port, f"{PATH}?since={largest}", ADMIN_HEADERS)
        assert status == 200
        assert (await sse.event())["kind"] == "snapshot"
        sse.writer.close()
        # Leading zeros do not count (tests/http/test_query_numbers.py): one
        # significant digit more is 400.
        r = await client.get(f"{PATH}?since={'2'.ljust(MAX_SEQ_DIGITS + 1, '0')}")
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        assert r.json()["message"] == (
            f"since: an integer of at most {MAX_SEQ_DIGITS} digits is required"
        ), r.json()
        r = await client.get(f"{PATH}?since=-1")
        assert r.status_code == 400 and r.json()["message"].startswith("since: an integer")
