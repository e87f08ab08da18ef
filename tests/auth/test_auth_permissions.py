"""The permission matrix: every row of the seed's glob and op-mask tables,
``{clientId}``, combined masks, rule expiry, first match, V1 beside V2, V1 admin."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.auth import ROOT, Authenticator, Principal
from syncd.errors import ApiError
from tests.auth.support import ROOT_SECRET, FakeClock, Mint

# The op-mask bits of docs/data-model.md#types.
OP_BITS: dict[str, dict[str, int]] = {
    "gcounter": {"increment": 0x01},
    "pncounter": {"increment": 0x01, "decrement": 0x02},
    "orset": {"add": 0x01, "remove": 0x02},
    "lwwregister": {"set": 0x01},
    "presence": {"update": 0x01, "leave": 0x01},
    "rga": {"insert": 0x01, "delete": 0x02},
    "tree": {"add": 0x01, "move": 0x02, "update": 0x04, "delete": 0x08},
}
PREFIX = {
    "gcounter": "gc:",
    "pncounter": "pn:",
    "orset": "or:",
    "lwwregister": "lw:",
    "presence": "pr:",
    "rga": "rg:",
    "tree": "tr:",
}

IDS = [
    "gc:clicks",
    "gc:",
    "or:cart-42",
    "or:cart-43",
    "or:cart-",
    "or:carts",
    "lw:title",
    "pr:room-a",
]

# The seed's glob table: pattern shape -> which of IDS it matches.
GLOB_ROWS: list[tuple[str, set[str]]] = [
    ("*", set(IDS)),
    ("gc:*", {"gc:clicks", "gc:"}),
    ("or:cart-42", {"or:cart-42"}),
    ("or:cart-*", {"or:cart-42", "or:cart-43", "or:cart-"}),
]


def _authn(auth: Authenticator, token: str, ns: str = "demo") -> Principal:
    return auth.authenticate(f"Bearer {token}", ns)


def _can_write(auth: Authenticator, p: Principal, crdt_id: str, type_name: str, mask: int) -> bool:
    try:
        auth.check_write(p, crdt_id, type_name, mask)
    except ApiError as e:
        assert (e.status, e.code) == (403, "forbidden")
        return False
    return True


@pytest.mark.parametrize(("pattern", "matching"), GLOB_ROWS)
@pytest.mark.parametrize("version", [1, 2])
def test_glob_shapes_read_and_write(
    auth: Authenticator, mint: Mint, pattern: str, matching: set[str], version: int
) -> None:
    if version == 1:
        token = mint(permissions={"read": [pattern], "write": [pattern]})
    else:
        token = mint(rules={"r": [{"p": pattern}], "w": [{"p": pattern}]})
    p = _authn(auth, token)
    for crdt_id in IDS:
        expected = crdt_id in matching
        assert auth.can_read(p, crdt_id) is expected, crdt_id
        assert _can_write(auth, p, crdt_id, "orset", 0x01) is expected, crdt_id
        if not expected:
            with pytest.raises(ApiError) as ei:
                auth.check_read(p, crdt_id)
            assert ei.value.status == 403
            assert ei.value.code == "forbidden"


def test_client_id_placeholder(auth: Authenticator, mint: Mint) -> None:
    rules = {"r": [{"p": "or:cart-{clientId}"}], "w": [{"p": "or:cart-{clientId}"}]}
    p = _authn(auth, mint(client_id=42, rules=rules))
    assert _can_write(auth, p, "or:cart-42", "orset", 0x01)
    assert not _can_write(auth, p, "or:cart-43", "orset", 0x01)
    assert not _can_write(auth, p, "or:cart-420", "orset", 0x01)
    assert not _can_write(auth, p, "or:cart-{clientId}", "orset", 0x01)
    assert auth.can_read(p, "or:cart-42")
    assert not auth.can_read(p, "or:cart-43")
    other = _authn(auth, mint(client_id=43, rules=rules))
    assert _can_write(auth, other, "or:cart-43", "orset", 0x01)
    assert not _can_write(auth, other, "or:cart-42", "orset", 0x01)


def test_client_id_placeholder_is_v2_only(auth: Authenticator, mint: Mint) -> None:
    p = _authn(auth, mint(client_id=42, permissions={"write": ["or:cart-{clientId}"]}))
    assert not _can_write(auth, p, "or:cart-42", "orset", 0x01)
    assert _can_write(auth, p, "or:cart-{clientId}", "orset", 0x01)


OP_ROWS = [(t, op, bit) for t, ops in OP_BITS.items() for op, bit in ops.items()]


@pytest.mark.parametrize(("type_name", "op", "bit"), OP_ROWS)
def test_every_op_bit(auth: Authenticator, mint: Mint, type_name: str, op: str, bit: int) -> None:
    crdt_id = PREFIX[type_name] + "x"
    all_bits = 0
    for b in OP_BITS[type_name].values():
        all_bits |= b
    # A rule allowing exactly this op's bit.
    p = _authn(auth, mint(rules={"w": [{"p": "*", "o": bit}]}))
    assert _can_write(auth, p, crdt_id, type_name, bit)
    for other_op, other_bit in OP_BITS[type_name].items():
        assert _can_write(auth, p, crdt_id, type_name, other_bit) is (other_bit == bit), other_op
    # A rule allowing every other bit of the type, but not this one.
    p = _authn(auth, mint(rules={"w": [{"p": "*", "o": all_bits & ~bit}]}))
    with pytest.raises(ApiError) as ei:
        auth.check_write(p, crdt_id, type_name, bit)
    assert (ei.value.status, ei.value.code) == (403, "forbidden")
    assert "mask" in ei.value.message
    assert type_name in ei.value.message
    # No mask: every op.
    p = _authn(auth, mint(rules={"w": [{"p": "*"}]}))
    assert _can_write(auth, p, crdt_id, type_name, bit)


@pytest.mark.parametrize(
    ("rule_mask", "op_mask", "allowed"),
    [
        (0x03, 0x01, True),
        (0x03, 0x02, True),
        (0x03, 0x03, True),  # a batch with both ops
        (0x01, 0x03, False),  # a batch whose second op is not allowed
        (0x02, 0x03, False),
        (0x03, 0x04, False),
        (0x03, 0x08, False),
        (0x0F, 0x0F, True),
        (0x0D, 0x02, False),
        (0x00, 0x01, False),  # o: 0 is an explicit deny
        # Nothing fits in o: 0, not even the empty mask of the up-front
        # checks of restore and revert (test_auth_zero_mask_server.py).
        (0x00, 0x00, False),
    ],
)
def test_combined_masks(
    auth: Authenticator, mint: Mint, rule_mask: int, op_mask: int, allowed: bool
) -> None:
    p = _authn(auth, mint(rules={"w": [{"p": "tr:*", "o": rule_mask}]}))
    assert _can_write(auth, p, "tr:doc", "tree", op_mask) is allowed


def test_read_rule_mask_is_ignored(auth: Authenticator, mint: Mint) -> None:
    p = _authn(auth, mint(rules={"r": [{"p": "*", "o": 0}]}))
    assert auth.can_read(p, "or:cart-1")


def test_expired_rule_is_skipped_for_the_next(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    e = clock.now + 1000
    rules = {
        "r": [{"p": "lw:secret", "e": e}],
        "w": [{"p": "or:*", "o": 0x01, "e": e}, {"p": "or:*", "o": 0x03}],
    }
    p = _authn(auth, mint(rules=rules))
    # Before e the first rule decides: add yes, remove no.
    assert _can_write(auth, p, "or:x", "orset", 0x01)
    assert not _can_write(auth, p, "or:x", "orset", 0x02)
    assert auth.can_read(p, "lw:secret")
    clock.advance(999)
    assert not _can_write(auth, p, "or:x", "orset", 0x02)
    # From e on, the first rule is skipped and the second one decides.
    clock.advance(1)
    assert _can_write(auth, p, "or:x", "orset", 0x02)
    assert not auth.can_read(p, "lw:secret")


def test_expired_only_rule_leaves_no_match(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    p = _authn(auth, mint(rules={"w": [{"p": "*", "e": clock.now - 1}]}))
    with pytest.raises(ApiError) as ei:
        auth.check_write(p, "gc:a", "gcounter", 0x01)
    assert ei.value.code == "forbidden"
    assert "no write rule matches" in ei.value.message


def test_first_match_wins_over_later_broader_rule(auth: Authenticator, mint: Mint) -> None:
    rules = {"w": [{"p": "or:cart-1", "o": 0x01}, {"p": "*"}], "r": [{"p": "*"}]}
    p = _authn(auth, mint(rules=rules))
    assert _can_write(auth, p, "or:cart-1", "orset", 0x01)
    assert not _can_write(auth, p, "or:cart-1", "orset", 0x02)
    assert _can_write(auth, p, "or:cart-2", "orset", 0x02)


def test_first_match_wins_broad_first(auth: Authenticator, mint: Mint) -> None:
    rules = {"w": [{"p": "or:*", "o": 0x01}, {"p": "or:cart-1"}]}
    p = _authn(auth, mint(rules=rules))
    assert not _can_write(auth, p, "or:cart-1", "orset", 0x02)


def test_no_rule_message(auth: Authenticator, mint: Mint) -> None:
    p = _authn(auth, mint(rules={"w": [{"p": "gc:*"}]}))
    with pytest.raises(ApiError) as ei:
        auth.check_write(p, "or:x", "orset", 0x01)
    assert "no write rule matches 'or:x'" in ei.value.message


def test_v1_and_v2_side_by_side(auth: Authenticator, mint: Mint) -> None:
    v1 = _authn(auth, mint(client_id=1, permissions={"read": ["*"], "write": ["gc:*"]}))
    v2 = _authn(auth, mint(client_id=2, rules={"r": [{"p": "gc:*"}], "w": [{"p": "*", "o": 0x01}]}))
    assert (v1.version, v2.version) == (1, 2)
    assert auth.can_read(v1, "or:a") and not auth.can_read(v2, "or:a")
    assert auth.can_read(v1, "gc:a") and auth.can_read(v2, "gc:a")
    # V1 has no masks: a matching write glob allows every op.
    assert _can_write(auth, v1, "gc:a", "gcounter", 0x01)
    assert not _can_write(auth, v1, "or:a", "orset", 0x01)
    assert _can_write(auth, v2, "or:a", "orset", 0x01)
    assert not _can_write(auth, v2, "or:a", "orset", 0x02)
    assert not auth.is_admin(v1, "demo") and not auth.is_admin(v2, "demo")


def test_v1_read_does_not_imply_write(auth: Authenticator, mint: Mint) -> None:
    p = _authn(auth, mint(permissions={"read": ["*"]}))
    with pytest.raises(ApiError) as ei:
        auth.check_write(p, "gc:a", "gcounter", 0x01)
    assert "no write permission matches 'gc:a'" in ei.value.message


def test_v1_admin(auth: Authenticator, mint: Mint) -> None:
    p = _authn(auth, mint(admin=True))
    assert p.ns_admin
    for crdt_id in IDS:
        assert auth.can_read(p, crdt_id)
        assert _can_write(auth, p, crdt_id, "tree", 0x0F)
    assert auth.is_admin(p, "demo")
    assert not auth.is_admin(p, "other")
    assert not auth.is_admin(p, None)
    auth.check_admin(p, "demo")
    with pytest.raises(ApiError) as ei:
        auth.check_admin(p, "other")
    assert (ei.value.status, ei.value.code) == (403, "forbidden")
    # Its namespace is the only one it gets into.
    with pytest.raises(ApiError) as ei:
        _authn(auth, mint(admin=True), ns="other")
    assert (ei.value.status, ei.value.code) == (403, "forbidden")


def test_v1_without_admin_is_not_admin(auth: Authenticator, mint: Mint) -> None:
    p = _authn(auth, mint(permissions={"read": ["*"], "write": ["*"], "admin": False}))
    with pytest.raises(ApiError):
        auth.check_admin(p, "demo")


def test_root_admin(auth: Authenticator) -> None:
    p = auth.authenticate(f"Bearer {ROOT_SECRET}", "anything")
    assert p is ROOT
    assert auth.can_read(p, "or:x")
    auth.check_write(p, "tr:x", "tree", 0xFF)
    assert auth.is_admin(p, "any-ns") and auth.is_admin(p, None)


@pytest.mark.parametrize(
    "rules",
    [
        {"w": [{"p": "or:*", "o": 0x01}]},
        {"w": [{"p": "or:cart-{clientId}", "o": 0x01}, {"p": "or:*", "o": 0}]},
    ],
)
def test_denials_are_403_forbidden(auth: Authenticator, mint: Mint, rules: dict[str, Any]) -> None:
    p = _authn(auth, mint(rules=rules))
    with pytest.raises(ApiError) as ei:
        auth.check_write(p, "or:cart-7", "orset", 0x02)
    assert ei.value.body()["error"] == "forbidden"
    assert ei.value.status == 403


def test_read_ends_follows_the_chain_of_deciding_rules(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    t = clock.now
    rules = {
        "r": [
            {"p": "gc:a", "e": t + 100},
            {"p": "gc:*", "e": t + 50},  # expires before the first: never decides gc:a
            {"p": "gc:a", "e": t + 300},  # decides from t+100 to t+300
            {"p": "lw:*", "e": t + 200},
            {"p": "pn:*"},
        ]
    }
    p = _authn(auth, mint(rules=rules, ttl_ms=1000))
    assert auth.read_ends(p, "gc:a") == t + 300
    assert auth.read_ends(p, "gc:b") == t + 50
    assert auth.read_ends(p, "lw:x") == t + 200
    assert auth.read_ends(p, "pn:x") == t + 1000  # no e: the token's expiry
    assert auth.read_ends(p, "or:x") == t  # not granted now
    clock.advance(150)  # the first gc:a rule has expired; the third decides now
    assert auth.can_read(p, "gc:a") and auth.read_ends(p, "gc:a") == t + 300
    assert auth.read_ends(p, "gc:b") == t + 150


def test_read_ended_says_why(auth: Authenticator, mint: Mint, clock: FakeClock) -> None:
    p = _authn(auth, mint(rules={"r": [{"p": "gc:a", "e": clock.now + 10}]}, ttl_ms=100))
    clock.advance(10)
    ended = auth.read_ended(p, "gc:a")
    assert (ended.status, ended.code) == (403, "forbidden") and "expired" in ended.message
    clock.advance(90)
    ended = auth.read_ended(p, "gc:a")
    assert (ended.status, ended.code, ended.message) == (401, "token_expired", "token expired")


def test_read_ends_for_v1_and_the_root_admin(
    auth: Authenticator, mint: Mint, clock: FakeClock
) -> None:
    p = _authn(auth, mint(permissions={"read": ["gc:*"]}, ttl_ms=500))
    assert auth.read_ends(p, "gc:a") == clock.now + 500
    assert auth.read_ends(p, "or:a") == clock.now
    assert auth.read_ends(ROOT, "gc:a") is None
    assert auth.seconds_until(clock.now + 500) == pytest.approx(0.501)
    assert auth.seconds_until(clock.now - 5) == 0
