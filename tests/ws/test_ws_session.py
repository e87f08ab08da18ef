"""The sans-I/O WebSocket session: bytes and the clock in, actions out, no socket."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from syncd.auth import ROOT, AdminSecret, Authenticator, Principal, SigningKey, issue_token
from syncd.crdt.engine import ApplyResult
from syncd.errors import ApiError
from syncd.ws.base_session import Action, Close, Finish, PauseReading, ResumeReading, Send
from syncd.ws.framing import CLOSE_INTERNAL_ERROR, CLOSE_TOKEN_EXPIRED, CLOSE_TOO_BIG
from syncd.ws.session import (
    MAX_INFLIGHT_OPS,
    RESUME_INFLIGHT_OPS,
    Apply,
    Session,
    StagedOp,
    Subscribe,
    Unsubscribe,
)
from tests.auth.support import ROOT_SECRET, FakeClock
from tests.ws.support import client_frame, parse_frame

PING_S = 10.0
MAX_BYTES = 4096


class Harness:
    """A session whose actions land in a list, as an adapter would see them."""

    def __init__(
        self,
        max_subscriptions: int = 3,
        auth: Authenticator | None = None,
        principal: Principal = ROOT,
    ) -> None:
        self.actions: list[Action] = []
        if auth is None:
            auth = Authenticator(SigningKey(bytes(32)), AdminSecret(ROOT_SECRET))
        self.session = Session(
            self.actions.append,
            auth,
            principal,
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
    assert h.session.inflight == 3  # the two ops and the pong queued behind them
    first, second = apply.run
    # The second op is done first: nothing goes out before the first's answer.
    h.session.ack(second, _result(2))
    h.session.answers_ready()
    assert h.take() == []
    h.session.fail(first, ApiError(400, "invalid_op", "no"))
    h.session.answers_ready()
    (error, ack, pong) = h.sent()  # one Send for the three answers
    assert error == {"kind": "error", "ref": 1, "error": "invalid_op", "message": "no"}
    assert ack == {"kind": "ack", "ref": 2, "seq": 2, "applied": 1}
    assert pong == {"kind": "pong", "ref": 3}
    assert h.session.inflight == 0


def test_the_reply_queue_is_let_go_once_every_answer_is_out() -> None:
    """An idle session keeps no queue (a deque is ~760 bytes): one is made for
    the answers owed and let go when the last goes out."""
    h = Harness()
    assert h.session._replies is None
    h.feed(_op(1))
    (apply,) = h.take()
    assert isinstance(apply, Apply) and h.session._replies is not None
    h.feed({"kind": "ping", "ref": 2})  # behind the op's answer
    assert h.take() == []
    h.session.ack(apply.run[0], _result(1))
    h.session.answers_ready()
    assert [m["kind"] for m in h.sent()] == ["ack", "pong"]
    assert h.session._replies is None
    h.feed(_op(3))  # a new queue for the next
    (apply,) = h.take()
    h.session.ack(apply.run[0], _result(2))
    h.session.answers_ready()
    assert [m["ref"] for m in h.sent()] == [3] and h.session._replies is None


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
    assert set(h.session.subscribed) == {"gc:a"}
    h.session.subscription_failed("gc:a", ApiError(503, "unavailable", "x"), binary=False)
    (failed,) = h.sent()
    assert failed == {"kind": "error", "id": "gc:a", "error": "unavailable", "message": "x"}
    assert not h.session.subscribed


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
    update = {"type": "presence", "epoch": "e", "op": {"op": "update"}}
    leave = {"type": "presence", "epoch": "e", "op": {"op": "leave"}}
    counter = {"type": "gcounter", "op": {"op": "increment"}}
    room, other, counted = apply.run
    h.session.ack(room, _result(1, [update]))
    h.session.ack(other, _result(1, [update]))
    h.session.ack(counted, _result(1, [counter]))
    h.feed(_op(4, "pr:other"))
    (apply2,) = (a for a in h.take() if isinstance(a, Apply))
    h.session.ack(apply2.run[0], _result(2, [leave]))  # left already: nothing owed
    h.session.connection_lost()
    assert h.session.disconnect_ops() == [("pr:room", "e", {"op": "leave"})]
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


# -- expiry ------------------------------------------------------------------------

TTL_MS = 10_000


def _expiring(rules: dict[str, Any]) -> tuple[Harness, FakeClock]:
    """A session for a V2 token of ``rules`` expiring in TTL_MS, on a fake clock."""
    clock = FakeClock()
    key = SigningKey(bytes(32))
    auth = Authenticator(key, AdminSecret(ROOT_SECRET), clock_ms=clock, rate_clock_ms=clock)
    token = issue_token(
        key, namespace="demo", client_id=1, ttl_ms=TTL_MS, rules=rules, now_ms=clock.now
    )
    return Harness(auth=auth, principal=auth.authenticate(f"Bearer {token}", "demo")), clock


def _close_code(action: Action) -> int:
    assert isinstance(action, Close), action
    return int.from_bytes(action.data[2:4], "big")


def test_the_expiry_due_is_the_token_or_an_earlier_rule() -> None:
    # gc:short is granted for 1 s, gc:long until the token expires.
    h, clock = _expiring({"r": [{"p": "gc:short", "e": 1_700_000_001_000}, {"p": "gc:long"}]})
    t = clock.now
    assert h.session.expiry_due == t + TTL_MS  # no subscription: the token's expiry
    h.feed({"kind": "subscribe", "id": "gc:long"})
    (long,) = h.take()
    assert isinstance(long, Subscribe) and long.until == t + TTL_MS
    assert h.session.expiry_due == t + TTL_MS
    h.feed({"kind": "subscribe", "id": "gc:short"})
    (short,) = h.take()
    assert isinstance(short, Subscribe) and short.until == 1_700_000_001_000
    # The short rule ends before the token: it is what the timer waits for.
    assert h.session.expiry_due == 1_700_000_001_000
    h.feed({"kind": "unsubscribe", "id": "gc:short"})
    h.take()
    assert h.session.expiry_due == t + TTL_MS


def test_a_later_rule_that_grants_the_read_too_carries_it_on() -> None:
    h, clock = _expiring({"r": [{"p": "gc:a", "e": 1_700_000_001_000}, {"p": "gc:*"}]})
    h.feed({"kind": "subscribe", "id": "gc:a"})
    (subscribe,) = h.take()
    assert isinstance(subscribe, Subscribe) and subscribe.until == clock.now + TTL_MS
    assert h.session.expiry_due == clock.now + TTL_MS


def test_a_rule_expiry_ends_only_what_it_granted() -> None:
    h, clock = _expiring({"r": [{"p": "gc:short", "e": 1_700_000_001_000}, {"p": "gc:long"}]})
    h.feed({"kind": "subscribe", "id": "gc:short"}, {"kind": "subscribe", "id": "gc:long"})
    h.take()
    clock.advance(999)  # a timer that fires early ends nothing
    h.session.expire()
    assert h.take() == []
    clock.advance(1)
    h.session.expire()
    unsubscribe, error = h.take()
    assert isinstance(unsubscribe, Unsubscribe) and unsubscribe.crdt_id == "gc:short"
    assert isinstance(error, Send)
    message = msgpack.unpackb(error.data[2:])
    assert message["kind"] == "error" and message["id"] == "gc:short"
    assert message["error"] == "forbidden" and "expired" in message["message"]
    assert set(h.session.subscribed) == {"gc:long"} and not h.session.closing
    assert h.session.expiry_due == clock.now - 1000 + TTL_MS


def test_token_expiry_ends_every_subscription_in_its_encoding_then_closes() -> None:
    h, clock = _expiring({"r": [{"p": "*"}]})
    h.feed({"kind": "subscribe", "id": "gc:a"})
    h.feed({"kind": "subscribe", "id": "gc:b"}, text=True)
    h.take()
    clock.advance(TTL_MS)
    h.session.expire()
    actions = h.take()
    assert [type(a) for a in actions] == [Unsubscribe, Send, Unsubscribe, Send, Close]
    binary, text = actions[1], actions[3]
    assert isinstance(binary, Send) and binary.data[0] == 0x82
    assert isinstance(text, Send) and text.data[0] == 0x81
    assert json.loads(text.data[2:]) == {
        "kind": "error",
        "id": "gc:b",
        "error": "token_expired",
        "message": "token expired",
    }
    assert _close_code(actions[4]) == CLOSE_TOKEN_EXPIRED
    assert h.session.expiry_due is None and not h.session.subscribed


def test_token_expiry_closes_after_the_answers_still_owed() -> None:
    h, clock = _expiring({"r": [{"p": "*"}], "w": [{"p": "*"}]})
    h.feed(_op(1))
    (apply,) = h.take()
    assert isinstance(apply, Apply)
    clock.advance(TTL_MS)
    h.session.expire()
    assert h.take() == []  # no subscription to end; the ack is still owed
    assert h.session.expiry_due is None
    h.feed(_op(2))  # too late: refused, answered behind the first
    assert h.take() == []
    h.session.ack(apply.run[0], _result(1))
    h.session.answers_ready()
    send, close = h.take()
    assert isinstance(send, Send) and _close_code(close) == CLOSE_TOKEN_EXPIRED
    buffer = bytearray(send.data)
    answers = []
    while (frame := parse_frame(buffer)) is not None:
        answers.append(msgpack.unpackb(frame[1]))
    assert answers[0] == {"kind": "ack", "ref": 1, "seq": 1, "applied": 1}
    assert answers[1]["ref"] == 2 and answers[1]["error"] == "token_expired"


def test_the_root_admin_never_expires() -> None:
    h = Harness()
    h.feed({"kind": "subscribe", "id": "gc:a"})
    (subscribe,) = h.take()
    assert isinstance(subscribe, Subscribe) and subscribe.until is None
    assert h.session.expiry_due is None
    h.session.expire()
    assert h.take() == []
