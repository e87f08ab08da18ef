"""The y-websocket protocol without I/O: messages in, actions (or a close) out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text, create_sync_message, create_update_message

from syncd.ws.base_session import Action, Send
from syncd.ws.framing import CLOSE_PROTOCOL_ERROR
from syncd.yjs.protocol import (
    ApplyUpdate,
    EmptyUpdate,
    ReadOnlyUpdate,
    RelayAwareness,
    SendAwareness,
    SendDiff,
    YjsSession,
    awareness_message,
    sync_step1,
    sync_step2,
    sync_update,
)


class Recorder:
    """A session whose actions and closes land in lists, as a channel would see them."""

    def __init__(self, *, writable: bool = True) -> None:
        self.actions: list[Action] = []
        self.closes: list[tuple[int, str]] = []
        self.session = YjsSession(self.actions.append, self, writable=writable)

    def close(self, code: int, reason: str = "") -> None:
        self.closes.append((code, reason))


def _session(*, writable: bool = True) -> tuple[YjsSession, list[Action]]:
    recorder = Recorder(writable=writable)
    return recorder.session, recorder.actions


def _update() -> bytes:
    doc: Doc = Doc()
    doc.get("t", type=Text).insert(0, "hi")
    return doc.get_update()


def test_the_opening_is_our_step1_then_the_rooms_awareness() -> None:
    session, actions = _session()
    session.start(b"\x00", b"\x01\x02\x03")
    assert actions == [Send(sync_step1(b"\x00")), Send(awareness_message(b"\x01\x02\x03"))]
    session, actions = _session()
    session.start(b"\x00", None)
    assert actions == [Send(sync_step1(b"\x00"))]


def test_pycrdts_messages_become_the_matching_actions() -> None:
    session, actions = _session()
    doc: Doc = Doc()
    session.receive(create_sync_message(doc))  # a peer's step 1
    assert actions == [SendDiff(doc.get_state())]
    update = _update()
    actions.clear()
    session.receive(create_update_message(update))
    session.receive(sync_step2(update))
    assert actions == [ApplyUpdate(update), ApplyUpdate(update, answer=True)]
    actions.clear()
    session.receive(awareness_message(b"\x00"))
    session.receive(b"\x03")  # query awareness
    assert actions == [RelayAwareness(b"\x00"), SendAwareness()]


def test_empty_updates_are_told_apart_and_unknown_message_types_ignored() -> None:
    session, actions = _session()
    session.receive(sync_update(b"\x00\x00"))
    session.receive(b"\x09\x01\x02")
    assert actions == [EmptyUpdate()]


def test_a_read_only_session_drops_updates() -> None:
    session, actions = _session(writable=False)
    for _ in range(3):
        session.receive(sync_update(_update()))
    assert actions == [ReadOnlyUpdate()] * 3


def test_malformed_messages_close_with_1002() -> None:
    for message in (b"", b"\x00", b"\x00\x02\x05ab", b"\x00\x09\x00", b"\x01\x04ab", "text"):
        recorder = Recorder()
        recorder.session.receive(message)
        assert recorder.actions == [], message
        ((code, reason),) = recorder.closes
        assert code == CLOSE_PROTOCOL_ERROR and reason, message


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_give_actions_or_a_close_never_an_exception(message: bytes) -> None:
    recorder = Recorder()
    recorder.session.receive(message)
    recorder.session.receive(sync_update(message))
    recorder.session.receive(awareness_message(message))
    assert all(
        isinstance(
            a,
            (
                Send,
                SendDiff,
                ApplyUpdate,
                RelayAwareness,
                SendAwareness,
                EmptyUpdate,
                ReadOnlyUpdate,
            ),
        )
        for a in recorder.actions
    )
    assert all(code == CLOSE_PROTOCOL_ERROR for code, _ in recorder.closes)
