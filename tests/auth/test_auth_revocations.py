"""Revocation and key rotation in the authenticator, sans-I/O: the table it
consults, the live-connection registry, the embedded store's file, and the
keys tokens verify under (docs/permissions.md#revoking-tokens,
docs/operations.md#rotating-the-signing-key)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from syncd.auth import AdminSecret, Authenticator, SigningKey, issue_token
from syncd.auth.authenticator import ROOT
from syncd.auth.permissions import V1Permissions
from syncd.auth.revocations import (
    REVOCATIONS_FILE,
    FileRevocationStore,
    Revocation,
    RevocationFileError,
    RevocationTable,
    parse_client_id_text,
    parse_revoke_body,
    write_atomically,
)
from syncd.auth.tokens import KEY_ID_HEX, Claims, sign_claims
from syncd.errors import ApiError
from tests.auth.support import ROOT_SECRET, FakeClock, Mint


class Conn:
    def __init__(self) -> None:
        self.ended = 0

    def end_revoked(self) -> None:
        self.ended += 1


def _revoked(auth: Authenticator, *revocations: Revocation) -> None:
    auth.revocations.replace(revocations)


def _code(auth: Authenticator, token: str, ns: str = "demo") -> str:
    try:
        auth.authenticate(f"Bearer {token}", ns)
    except ApiError as exc:
        return exc.code
    return "ok"


# -- revocation ------------------------------------------------------------------


def test_tokens_issued_before_the_line_are_refused(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    early = mint(client_id=42)
    clock.now += 10
    late = mint(client_id=42)
    other = mint(client_id=43)
    assert _code(auth, early) == _code(auth, late) == "ok"  # cached, then revoked
    _revoked(auth, Revocation("demo", 42, clock.now, clock.now))
    assert _code(auth, early) == "token_revoked"
    assert _code(auth, late) == "ok"  # issued at before_ms: not before it
    assert _code(auth, other) == "ok"
    # Another namespace's revocation of the same client id is another client.
    _revoked(auth, Revocation("elsewhere", 42, clock.now + 1, clock.now))
    assert _code(auth, early) == "ok"
    # The per-connection check (before each WebSocket op) sees it too.
    _revoked(auth, Revocation("demo", 42, clock.now + 1, clock.now))
    principal = auth.principal_for(late)
    with pytest.raises(ApiError) as info:
        auth.check_expiry(principal)
    assert (info.value.status, info.value.code) == (401, "token_revoked")


def test_expiry_is_reported_before_revocation(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    token = mint(client_id=42, ttl_ms=5)
    _revoked(auth, Revocation("demo", 42, clock.now + 1, clock.now))
    assert _code(auth, token) == "token_revoked"
    clock.now += 5
    assert _code(auth, token) == "token_expired"


def test_a_token_without_issued_at_counts_as_issued_at_0(
    auth: Authenticator, key: SigningKey, clock: FakeClock
) -> None:
    claims = Claims("demo", 42, clock.now + 1000, V1Permissions(("*",), ("*",)))
    legacy = sign_claims(claims, key)
    assert auth.principal_for(legacy).issued_at == 0
    assert _code(auth, legacy) == "ok"
    _revoked(auth, Revocation("demo", 42, 1, 0))
    assert _code(auth, legacy) == "token_revoked"
    _revoked(auth, Revocation("demo", 42, 0, 0))
    assert _code(auth, legacy) == "ok"  # before 0: nothing is


def test_the_root_admin_cannot_be_revoked(auth: Authenticator) -> None:
    _revoked(auth, Revocation("demo", 0, 2**62, 0))
    assert auth.authenticate(f"Bearer {ROOT_SECRET}", "demo") is ROOT
    assert auth.revocations.watch(ROOT, Conn()) is False
    assert auth.revocations.live_count() == 0


def test_replace_ends_the_live_connections_a_new_or_later_line_refuses(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    table = auth.revocations
    early = auth.principal_for(mint(client_id=42))
    clock.now += 10
    late = auth.principal_for(mint(client_id=42))
    other = auth.principal_for(mint(client_id=43))
    conns = {name: Conn() for name in ("early", "late", "other")}
    assert not table.watch(early, conns["early"])
    assert not table.watch(late, conns["late"])
    assert not table.watch(other, conns["other"])
    assert table.replace([Revocation("demo", 42, early.issued_at + 1, 0)]) == 1
    assert [c.ended for c in conns.values()] == [1, 0, 0]
    # The same line again ends nothing more; a later one ends the later token.
    assert table.replace([Revocation("demo", 42, early.issued_at + 1, 0)]) == 0
    assert table.replace([Revocation("demo", 42, late.issued_at + 1, 0)]) == 1
    assert [c.ended for c in conns.values()] == [1, 1, 0]
    assert table.live_count() == 1
    # Registering a connection of a revoked token says so instead.
    assert table.watch(early, Conn()) is True
    table.unwatch(other, conns["other"])
    assert table.live_count() == 0
    # Lifting: the dictionary the authenticator reads is the same object, emptied.
    before = table.before
    table.replace([])
    assert table.before is before and before == {}


def test_listing_is_per_namespace_by_client_id() -> None:
    table = RevocationTable()
    table.replace([Revocation("b", 9, 5, 5), Revocation("a", 3, 1, 1), Revocation("b", 2, 1, 1)])
    assert [r.client_id for r in table.listing("b")] == [2, 9]
    assert table.listing("none") == [] and table.count("b") == 2
    assert table.get("a", 3) == Revocation("a", 3, 1, 1)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"client_id": 1}, (1, None)),
        ({"client_id": 1, "before_ms": None}, (1, None)),
        ({"client_id": 0, "before_ms": 0}, (0, 0)),
    ],
)
def test_revoke_bodies(body: Any, expected: tuple[int, int | None]) -> None:
    parsed = parse_revoke_body(body)
    assert (parsed.client_id, parsed.before_ms) == expected


def test_revoke_messages_name_the_field_first() -> None:
    """``field: problem``, as every validation message of the API."""
    limit = 2**53 - 1
    for body, message in [
        ([1], "body: must be a JSON object"),
        ({}, f"client_id: an integer from 0 to {limit} is required"),
        ({"client_id": "1"}, f"client_id: must be an integer from 0 to {limit}"),
        ({"client_id": -1}, f"client_id: must be an integer from 0 to {limit}"),
        (
            {"client_id": 1, "before_ms": -1},
            f"before_ms: must be an integer from 0 to {2**63 - 1} (ms since the epoch)",
        ),
    ]:
        with pytest.raises(ApiError) as info:
            parse_revoke_body(body)
        assert (info.value.status, info.value.message) == (400, message), body
    for text, message in [
        ("x1", "client_id: must be a decimal integer"),
        ("01", "client_id: must be a decimal integer"),
        ("9" * 17, f"client_id: must be an integer from 0 to {limit}"),
        (str(limit + 1), f"client_id: must be an integer from 0 to {limit}"),
    ]:
        with pytest.raises(ApiError) as info:
            parse_client_id_text(text)
        assert (info.value.status, info.value.message) == (400, message), text


# -- the embedded store's file ---------------------------------------------------------


async def test_the_file_store_writes_atomically_and_loads(tmp_path: Path) -> None:
    applied: list[list[Revocation]] = []
    store = FileRevocationStore(tmp_path)
    await store.open(applied.append)
    assert applied == [[]] and not (tmp_path / REVOCATIONS_FILE).exists()
    await store.put(Revocation("b", 2, 10, 11))
    await store.put(Revocation("a", 1, 20, 21))
    await store.put(Revocation("a", 1, 30, 31))  # replaces
    assert await store.delete("b", 9) is False
    assert applied[-1] == [Revocation("a", 1, 30, 31), Revocation("b", 2, 10, 11)]
    doc = json.loads((tmp_path / REVOCATIONS_FILE).read_text())
    assert doc == {
        "format": 1,
        "revocations": [
            {"namespace": "a", "client_id": 1, "before_ms": 30, "revoked_at": 31},
            {"namespace": "b", "client_id": 2, "before_ms": 10, "revoked_at": 11},
        ],
    }
    assert [p.name for p in tmp_path.iterdir()] == [REVOCATIONS_FILE]  # no temp file left
    again: list[list[Revocation]] = []
    await FileRevocationStore(tmp_path).open(again.append)
    assert again == [applied[-1]]
    assert await store.delete("a", 1) is True
    await FileRevocationStore(tmp_path).open(again.append)
    assert again[-1] == [Revocation("b", 2, 10, 11)]


async def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    applied: list[list[Revocation]] = []
    store = FileRevocationStore(tmp_path / "gone")
    await store.open(applied.append)
    with pytest.raises(ApiError) as info:
        await store.put(Revocation("a", 1, 2, 3))
    assert info.value.status == 503 and applied == [[]]


@pytest.mark.parametrize(
    "content",
    [
        "",
        "[]",
        '{"format": 2, "revocations": []}',
        '{"format": 1}',
        '{"format": 1, "revocations": [{"namespace": "a/b", "client_id": 1,'
        ' "before_ms": 1, "revoked_at": 1}]}',
        '{"format": 1, "revocations": [{"namespace": "a", "client_id": -1,'
        ' "before_ms": 1, "revoked_at": 1}]}',
        '{"format": 1, "revocations": [{"namespace": "a", "client_id": 1, "before_ms": 1}]}',
    ],
)
async def test_a_damaged_file_is_refused_naming_it(tmp_path: Path, content: str) -> None:
    write_atomically(tmp_path / REVOCATIONS_FILE, content.encode())
    with pytest.raises(RevocationFileError) as info:
        await FileRevocationStore(tmp_path).open(lambda _: None)
    assert str(tmp_path / REVOCATIONS_FILE) in str(info.value)


# -- key rotation ------------------------------------------------------------------------


def test_the_key_id_is_the_start_of_the_public_key() -> None:
    seed = bytes(range(32))
    public = bytes(nacl.signing.SigningKey(seed).verify_key).hex()
    assert SigningKey(seed).key_id == public[:KEY_ID_HEX] and KEY_ID_HEX == 8


def test_tokens_of_previous_keys_verify_and_name_their_key(clock: FakeClock) -> None:
    old, new, unknown = (SigningKey(bytes([i]) * 32) for i in (1, 2, 3))
    auth = Authenticator(
        new,
        AdminSecret(ROOT_SECRET),
        clock_ms=clock,
        rate_clock_ms=clock,
        previous_keys=[old, new, old],  # repeats, and the current key, count once
    )
    assert [k.key_id for k in auth.keys] == [new.key_id, old.key_id]

    def token(key: SigningKey) -> str:
        return issue_token(key, namespace="demo", client_id=1, ttl_ms=1000, now_ms=clock.now)

    assert auth.authenticate(f"Bearer {token(old)}", "demo").key_id == old.key_id
    assert auth.authenticate(f"Bearer {token(new)}", "demo").key_id == new.key_id
    with pytest.raises(ApiError) as info:
        auth.authenticate(f"Bearer {token(unknown)}", "demo")
    assert (info.value.status, info.value.code) == (401, "invalid_token")
    # Without the previous key, its tokens are refused.
    alone = Authenticator(new, None, clock_ms=clock, rate_clock_ms=clock)
    with pytest.raises(ApiError):
        alone.authenticate(f"Bearer {token(old)}", "demo")
