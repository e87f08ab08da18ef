"""The sans-I/O WebSocket session: bytes and the clock in, actions out, no socket."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from syncd.auth import ROOT, AdminSecret, Authenticator, SigningKey
from syncd.crdt.engine import ApplyResult
from syncd.errors import ApiError
from syncd.ws.framing import CLOSE_INTERNAL_ERROR, CLOSE_TOO_BIG
from syncd.ws.session import (
    MAX_INFLIGHT_OPS,
    RESUME_INFLIGHT_OPS,
    Action,
    Apply,
    Close,
    Finish,
    PauseReading,
    ResumeReading,
    Send,
    Session,
    StagedOp,
    Subscribe,
    Unsubscribe,
)
from tests.ws.support import client_frame, parse_frame

PING_S = 10.0
MAX_BYTES = 4096


class Harness:
    """A session whose actions land in a list, as an adapter would see them."""

    def __init__(self, max_subscriptions: int = 3) -> None:
        self.actions: list[Action] = []
        auth = Authenticator(SigningKey(bytes(32)), AdminSecret("root-secret-for-tests-0123456789"))
        self.session = Session(
            self.actions.append,
            auth,
            ROOT,
            max_message_bytes=MAX_BYTES,
            json_max_depth=32,
            max_subscriptions=max_subscriptions,
            ping_s=PING_S,
            now=0.0,
        )

    def feed(self, *messages: dict[str, Any], now: float = 1.0, text: bool = False) -> None:
        data = b"".join(
            client_frame(0x1, json.dumps(m).encode())
            if text
            else client_frame(0x2, msgpack.packb(m))
            for m in messages
        )
        self.session.data_received(data, now)

    def take(self) -> list[Action]:
        actions, self.actions[:] = list(self.actions), []
        return actions

    def sent(self) -> list[dict[str, Any]]:
        """Every message in the Send actions so far (taken), decoded."""
        out: list[dict[str, Any]] = []
        for action in self.take():
            assert isinstance(action, Send), action
            buffer = bytearray(action.data)
            while (frame := parse_frame(buffer)) is not None:
                opcode, payload = frame
                out.append(msgpack.unpackb(payload) if opcode == 0x2 else json.loads(payload))
        return out


def _result(seq: int, records: list[dict[str, Any]] | None = None) -> ApplyResult:
    return ApplyResult(
        records=records or [], seq=seq, applied=1, duplicate=False, extra={}, created=False
    )


def _op(ref: int, crdt_id: str = "gc:a") -> dict[str, Any]:
    return {"kind": "op", "id": crdt_id, "ref": ref, "op": {"op": "increment"}}


def test_a_reads_ops_are_applied_together_and_answered_in_arrival_order() -> None:
    h = Harness()
    h.feed(_op(1), _op(2), {"kind": "ping", "ref": 3})
    (apply,) = h.take()
    assert isinstance(apply, Apply)
    assert [s.ref for s in apply.run] == [1, 2]
    assert h.session.inflight == 2
    first, second = apply.run
    # The second op is done first: nothing goes out before the first's answer.
    h.session.ack(second, _result(2))
    h.session.answers_ready()
    assert h.take() == []
    h.session.fail(first, ApiError(400, "invalid_op", "no"))
    h.session.answers_ready()
    (error, ack, pong) = h.sent()  # one Send for the three answers
    assert error == {"kind": "error", "ref": 1, "error": "invalid_op", "message": "no"}
    assert ack == {"kind": "ack", "ref": 2, "seq": 2}
    assert pong == {"kind": "pong", "ref": 3}
    assert h.session.inflight == 0


def test_a_reply_goes_out_at_once_when_nothing_is_owed() -> None:
    h = Harness()
    h.feed({"kind": "ping"}, text=True)
    (action,) = h.take()
    assert isinstance(action, Send) and action.data[0] == 0x81  # a text frame, like the ping
    assert h.session.inflight == 0


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"kind": "nope"}, "bad_request"),
        ({"kind": "op", "id": "gc:a", "op": {}}, "bad_request"),  # no ref
        ({"kind": "op", "ref": 1, "id": "zz:bad id", "op": {}}, "invalid_id"),
        ({"kind": "subscribe", "id": "gc:a", "since": -1}, "bad_request"),
    ],
)
def test_a_bad_message_gets_an_error_and_the_session_goes_on(
    message: dict[str, Any], error: str
) -> None:
    h = Harness()
    h.feed(message)
    (reply,) = h.sent()
    assert reply["kind"] == "error" and reply["error"] == error
    h.feed({"kind": "ping"})
    assert h.sent() == [{"kind": "pong"}]


def test_subscribe_again_starts_afresh_and_the_limit_is_an_error() -> None:
    h = Harness(max_subscriptions=2)
    h.feed({"kind": "subscribe", "id": "gc:a"}, {"kind": "subscribe", "id": "gc:b", "since": 4})
    a, b = h.take()
    assert isinstance(a, Subscribe) and (a.crdt_id, a.since, a.binary) == ("gc:a", None, True)
    assert isinstance(b, Subscribe) and (b.crdt_id, b.since) == ("gc:b", 4)
    h.feed({"kind": "subscribe", "id": "gc:a"})
    drop, again = h.take()
    assert isinstance(drop, Unsubscribe) and drop.crdt_id == "gc:a"
    assert isinstance(again, Subscribe) and again.crdt_id == "gc:a"
    h.feed({"kind": "subscribe", "id": "gc:c"})
    (refused,) = h.sent()
    assert refused["error"] == "bad_request" and refused["id"] == "gc:c"
    h.feed({"kind": "unsubscribe", "id": "gc:b"}, {"kind": "unsubscribe", "id": "gc:zz"})
    (gone,) = h.take()  # unsubscribing from what is not held does nothing
    assert isinstance(gone, Unsubscribe) and gone.crdt_id == "gc:b"
    assert h.session.subscribed == {"gc:a"}
    h.session.subscription_failed("gc:a", ApiError(503, "unavailable", "x"), binary=False)
    (failed,) = h.sent()
    assert failed == {"kind": "error", "id": "gc:a", "error": "unavailable", "message": "x"}
    assert h.session.subscribed == set()


def test_reading_stops_at_the_inflight_limit_and_resumes_at_half() -> None:
    h = Harness()
    h.feed(*(_op(i) for i in range(MAX_INFLIGHT_OPS + 5)))
    pause, apply = h.take()
    assert isinstance(apply, Apply) and len(apply.run) == MAX_INFLIGHT_OPS
    assert isinstance(pause, PauseReading) and h.session.held
    h.session.process()  # held: nothing more is read
    assert h.take() == []
    to_answer = MAX_INFLIGHT_OPS - RESUME_INFLIGHT_OPS
    for staged in apply.run[: to_answer - 1]:
        h.session.ack(staged, _result(1))
    h.session.answers_ready()
    assert h.session.held and not any(isinstance(a, ResumeReading) for a in h.take())
    h.session.ack(apply.run[to_answer - 1], _result(1))
    h.session.answers_ready()
    actions = h.take()
    assert isinstance(actions[0], Send)
    assert isinstance(actions[1], Apply) and [s.ref for s in actions[1].run] == list(
        range(MAX_INFLIGHT_OPS, MAX_INFLIGHT_OPS + 5)
    )
    assert isinstance(actions[2], ResumeReading) and not h.session.held


def test_a_peer_that_does_not_read_is_not_answered_further() -> None:
    h = Harness()

    def pause_on_send(action: Action) -> None:
        h.actions.append(action)
        if isinstance(action, Send):
            h.session.write_paused = True  # what the adapter's transport would say

    h.session._emit = pause_on_send
    h.feed({"kind": "ping", "ref": 1}, {"kind": "ping", "ref": 2})
    assert len(h.sent()) == 1
    h.session.writing_resumed()
    assert h.sent() == [{"kind": "pong", "ref": 2}]


def test_keepalive_pings_a_silent_peer_then_closes_1011() -> None:
    h = Harness()
    assert h.session.keepalive_due == PING_S
    assert h.session.keepalive(PING_S, PING_S) == 2 * PING_S
    (ping,) = h.take()
    assert isinstance(ping, Send) and ping.data[0] == 0x89
    # Fired late (the loop was stalled): judged again soon, not closed.
    late = h.session.keepalive(2 * PING_S + PING_S, 2 * PING_S)
    assert late is not None and late > 3 * PING_S and h.take() == []
    assert h.session.keepalive(late, late) is None
    (close,) = h.take()
    assert isinstance(close, Close) and close.await_peer
    assert int.from_bytes(close.data[2:4], "big") == CLOSE_INTERNAL_ERROR
    assert h.session.closing and h.session.keepalive(late + 1, late + 1) is None


def test_any_bytes_answer_a_ping_and_postpone_the_next() -> None:
    h = Harness()
    h.session.keepalive(PING_S, PING_S)
    h.take()
    h.feed({"kind": "ping"}, now=PING_S + 1)
    h.take()
    assert h.session.keepalive(2 * PING_S, 2 * PING_S) == 2 * PING_S + 1
    assert h.take() == []


def test_the_peers_close_is_answered_and_finishes() -> None:
    h = Harness()
    h.session.data_received(client_frame(0x8, (1000).to_bytes(2, "big") + b"bye"), 1.0)
    (finish,) = h.take()
    assert isinstance(finish, Finish) and finish.data[0] == 0x88
    assert h.session.closing


def test_an_oversized_message_closes_1009_and_reads_on_for_the_close() -> None:
    h = Harness()
    h.session.data_received(client_frame(0x2, b"x" * (MAX_BYTES + 1)), 1.0)
    (close,) = h.take()
    assert isinstance(close, Close) and close.await_peer
    assert int.from_bytes(close.data[2:4], "big") == CLOSE_TOO_BIG
    h.session.data_received(client_frame(0x8, (1000).to_bytes(2, "big")), 2.0)
    (finish,) = h.take()
    assert isinstance(finish, Finish)


def test_disconnect_ops_follow_what_the_connection_wrote() -> None:
    h = Harness()
    h.feed(_op(1, "pr:room"), _op(2, "pr:other"), _op(3, "gc:a"))
    (apply,) = h.take()
    assert isinstance(apply, Apply)
    update = {"type": "presence", "op": {"op": "update"}}
    leave = {"type": "presence", "op": {"op": "leave"}}
    counter = {"type": "gcounter", "op": {"op": "increment"}}
    room, other, counted = apply.run
    h.session.ack(room, _result(1, [update]))
    h.session.ack(other, _result(1, [update]))
    h.session.ack(counted, _result(1, [counter]))
    h.feed(_op(4, "pr:other"))
    (apply2,) = (a for a in h.take() if isinstance(a, Apply))
    h.session.ack(apply2.run[0], _result(2, [leave]))  # left already: nothing owed
    h.session.connection_lost()
    assert h.session.disconnect_ops() == [("pr:room", {"op": "leave"})]
    assert h.session.disconnect_ops() == []


def test_an_op_answered_after_the_connection_is_lost_sends_nothing() -> None:
    h = Harness()
    h.feed(_op(1))
    (apply,) = h.take()
    assert isinstance(apply, Apply)
    staged: StagedOp = apply.run[0]
    h.session.connection_lost()
    h.session.ack(staged, _result(1))
    Session.drop(staged)
    h.session.answers_ready()
    assert h.take() == []
