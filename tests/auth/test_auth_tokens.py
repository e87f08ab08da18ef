"""The token codec: round trips, and every forgery or malformation refused with
the right code (never a 500)."""

from __future__ import annotations

import base64
from typing import Any

import msgpack
import pytest

from syncd.auth import Authenticator, SigningKey, keygen, parse_token, verify_token
from syncd.auth.permissions import Rule, V1Permissions, V2Permissions
from syncd.auth.tokens import MAX_TOKEN_BYTES, Claims, sign_claims
from syncd.errors import ApiError
from tests.auth.support import FakeClock, Mint


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_token(key: SigningKey, claims: Any) -> str:
    """A token over arbitrary claims (any shape), signed with ``key``."""
    payload = msgpack.packb(claims, use_bin_type=True)
    return f"{b64(payload)}.{b64(key.sign(payload))}"


def good_claims(clock: FakeClock, **overrides: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "namespace": "demo",
        "client_id": 42,
        "expires_at": clock.now + 60_000,
        "permissions": {"read": ["*"], "write": ["*"], "admin": False},
    }
    claims.update(overrides)
    return claims


def refused(auth: Authenticator, token: str, ns: str = "demo") -> ApiError:
    with pytest.raises(ApiError) as ei:
        auth.authenticate(f"Bearer {token}", ns)
    return ei.value


def test_keygen_and_key_from_hex() -> None:
    hex_key = keygen()
    assert len(hex_key) == 64
    assert int(hex_key, 16) >= 0
    assert keygen() != hex_key
    key = SigningKey.from_hex(hex_key)
    assert key.hex() == hex_key
    assert SigningKey.from_hex(hex_key.upper()).hex() == hex_key


@pytest.mark.parametrize(
    "bad", ["", "11" * 31, "11" * 33, "zz" * 32, " " + "11" * 32, "11 " * 21 + "1"]
)
def test_bad_key_hex_is_refused_without_echoing_it(bad: str) -> None:
    with pytest.raises(ValueError) as ei:
        SigningKey.from_hex(bad)
    assert "64 hexadecimal" in str(ei.value)
    if bad.strip():
        assert bad.strip() not in str(ei.value)


def test_round_trip_v1_and_v2(key: SigningKey) -> None:
    for perms in (
        V1Permissions(("gc:*",), ("or:cart-42",), admin=True),
        V2Permissions(
            (Rule("*"),), (Rule("or:cart-{clientId}", 0x03, 1_800_000_000_000),), rate_limit=7
        ),
    ):
        claims = Claims("ns-1", 9, 1_700_000_000_000, perms)
        token = sign_claims(claims, key)
        assert "=" not in token
        assert verify_token(token, key)[0] == claims
        assert parse_token(token)[0] == claims


def test_claims_are_the_seed_msgpack_map(key: SigningKey) -> None:
    claims = Claims("demo", 1, 5, V2Permissions((Rule("*"),), (), None))
    payload_b64, _, sig_b64 = sign_claims(claims, key).partition(".")
    payload = base64.urlsafe_b64decode(payload_b64 + "=" * (-len(payload_b64) % 4))
    assert msgpack.unpackb(payload) == {
        "namespace": "demo",
        "client_id": 1,
        "expires_at": 5,
        "permissions": {"v": 2, "r": [{"p": "*"}], "w": []},
    }
    sig = base64.urlsafe_b64decode(sig_b64 + "=" * (-len(sig_b64) % 4))
    assert key.verify(payload, sig)


def test_padding_is_accepted(auth: Authenticator, mint: Mint) -> None:
    token = mint(permissions={"read": ["*"]})
    parts = token.split(".")
    padded = ".".join(p + "=" * (-len(p) % 4) for p in parts)
    assert padded != token
    assert auth.authenticate(f"Bearer {padded}", "demo").client_id == 42


def test_tampered_claims(
    auth: Authenticator, key: SigningKey, mint: Mint, clock: FakeClock
) -> None:
    token = mint(permissions={"read": ["gc:*"]})
    _, _, sig = token.partition(".")
    payload = msgpack.packb(good_claims(clock, permissions={"read": ["*"], "write": ["*"]}))
    e = refused(auth, f"{b64(payload)}.{sig}")
    assert (e.status, e.code) == (401, "invalid_token")
    # Flip one bit of the signature, too.
    head, _, sig = token.partition(".")
    raw = bytearray(base64.urlsafe_b64decode(sig + "=="))
    raw[0] ^= 1
    e = refused(auth, f"{head}.{b64(bytes(raw))}")
    assert (e.status, e.code) == (401, "invalid_token")


def test_signature_from_another_key(auth: Authenticator, clock: FakeClock) -> None:
    other = SigningKey.from_hex("22" * 32)
    e = refused(auth, raw_token(other, good_claims(clock)))
    assert (e.status, e.code) == (401, "invalid_token")
    assert "signature" in e.message


def test_truncated_tokens(auth: Authenticator, mint: Mint) -> None:
    token = mint(permissions={"read": ["*"]})
    dot = token.index(".")
    for cut in sorted({1, 5, dot - 1, dot, dot + 1, dot + 10, len(token) - 1, len(token) - 2}):
        e = refused(auth, token[:cut])
        assert (e.status, e.code) == (401, "invalid_token"), cut
    e = refused(auth, token[dot:])
    assert e.code == "invalid_token"


def test_non_msgpack_payload_even_if_signed(auth: Authenticator, key: SigningKey) -> None:
    for payload in (b"", b"\xc1", b"{json: 1}", b"\x92\x01", b"\xa3abc", b"\xdf\xff\xff\xff\xff"):
        e = refused(auth, f"{b64(payload)}.{b64(key.sign(payload))}")
        assert (e.status, e.code) == (401, "invalid_token"), payload


def test_trailing_garbage_even_if_signed(
    auth: Authenticator, key: SigningKey, clock: FakeClock
) -> None:
    payload = msgpack.packb(good_claims(clock)) + b"\x00"
    e = refused(auth, f"{b64(payload)}.{b64(key.sign(payload))}")
    assert e.code == "invalid_token"


def test_one_megabyte_token(auth: Authenticator) -> None:
    e = refused(auth, "A" * (1 << 20) + "." + "B" * 86)
    assert (e.status, e.code) == (401, "invalid_token")
    assert str(MAX_TOKEN_BYTES) in e.message


def test_token_at_the_size_cap(auth: Authenticator, key: SigningKey, clock: FakeClock) -> None:
    # Patterns are capped at 512 characters, so pad with several of them.
    def padded(pad: int) -> str:
        n, rest = divmod(pad, 500)
        read = ["x" * 500] * n + ["y" * rest]
        return raw_token(key, good_claims(clock, permissions={"read": read}))

    pad = 2800
    while len(padded(pad + 1)) <= MAX_TOKEN_BYTES:
        pad += 1
    assert len(padded(pad)) <= MAX_TOKEN_BYTES < len(padded(pad + 1))
    assert auth.authenticate(f"Bearer {padded(pad)}", "demo").client_id == 42
    e = refused(auth, padded(pad + 1))
    assert (e.status, e.code) == (401, "invalid_token")


WRONG_CLAIMS: list[tuple[str, dict[str, Any]]] = [
    ("client_id bool", {"client_id": True}),
    ("client_id negative", {"client_id": -1}),
    ("client_id string", {"client_id": "42"}),
    ("client_id float", {"client_id": 42.0}),
    ("client_id over 2^53", {"client_id": 2**53}),
    ("expires_at float", {"expires_at": 1.5e12}),
    ("expires_at bool", {"expires_at": True}),
    ("expires_at negative", {"expires_at": -5}),
    ("expires_at none", {"expires_at": None}),
    ("namespace int", {"namespace": 5}),
    ("namespace bad syntax", {"namespace": "../etc"}),
    ("namespace empty", {"namespace": ""}),
    ("namespace bytes", {"namespace": b"demo"}),
    ("permissions list", {"permissions": ["*"]}),
    ("permissions none", {"permissions": None}),
    ("read string", {"permissions": {"read": "*", "write": []}}),
    ("read of ints", {"permissions": {"read": [1], "write": []}}),
    ("admin string", {"permissions": {"read": [], "write": [], "admin": "yes"}}),
    ("admin int", {"permissions": {"read": [], "write": [], "admin": 1}}),
    ("v1 unknown field", {"permissions": {"read": [], "write": [], "root": True}}),
    ("v 3", {"permissions": {"v": 3, "r": [], "w": []}}),
    ("v true", {"permissions": {"v": True, "r": [], "w": []}}),
    ("v string", {"permissions": {"v": "2", "r": [], "w": []}}),
    ("rule not map", {"permissions": {"v": 2, "r": ["*"], "w": []}}),
    ("rule without p", {"permissions": {"v": 2, "r": [{"o": 1}], "w": []}}),
    ("rule p int", {"permissions": {"v": 2, "r": [{"p": 1}], "w": []}}),
    ("rule o bool", {"permissions": {"v": 2, "r": [], "w": [{"p": "*", "o": True}]}}),
    ("rule o 256", {"permissions": {"v": 2, "r": [], "w": [{"p": "*", "o": 256}]}}),
    ("rule o negative", {"permissions": {"v": 2, "r": [], "w": [{"p": "*", "o": -1}]}}),
    ("rule e string", {"permissions": {"v": 2, "r": [], "w": [{"p": "*", "e": "soon"}]}}),
    ("rule e float", {"permissions": {"v": 2, "r": [], "w": [{"p": "*", "e": 1.0}]}}),
    ("rule unknown field", {"permissions": {"v": 2, "r": [], "w": [{"p": "*", "x": 1}]}}),
    ("rl zero", {"permissions": {"v": 2, "r": [], "w": [], "rl": 0}}),
    ("rl bool", {"permissions": {"v": 2, "r": [], "w": [], "rl": True}}),
    ("rl float", {"permissions": {"v": 2, "r": [], "w": [], "rl": 10.5}}),
    ("rl huge", {"permissions": {"v": 2, "r": [], "w": [], "rl": 10**9}}),
    ("w not list", {"permissions": {"v": 2, "r": [], "w": {"p": "*"}}}),
    ("too many rules", {"permissions": {"v": 2, "r": [{"p": "a"}] * 65, "w": []}}),
]


@pytest.mark.parametrize(("name", "override"), WRONG_CLAIMS, ids=[n for n, _ in WRONG_CLAIMS])
def test_wrong_claim_types_even_if_signed(
    auth: Authenticator, key: SigningKey, clock: FakeClock, name: str, override: dict[str, Any]
) -> None:
    e = refused(auth, raw_token(key, good_claims(clock, **override)))
    assert (e.status, e.code) == (401, "invalid_token"), name


@pytest.mark.parametrize(
    "claims",
    [
        "just a string",
        [1, 2, 3],
        42,
        {"namespace": "demo", "client_id": 1, "expires_at": 2},  # permissions missing
        {1: "int keys"},
    ],
)
def test_non_claims_payload_even_if_signed(
    auth: Authenticator, key: SigningKey, claims: Any
) -> None:
    e = refused(auth, raw_token(key, claims))
    assert e.code == "invalid_token"


def test_extra_claim_refused(auth: Authenticator, key: SigningKey, clock: FakeClock) -> None:
    e = refused(auth, raw_token(key, good_claims(clock, iat=1)))
    assert e.code == "invalid_token"


def test_deeply_nested_payload(auth: Authenticator, key: SigningKey) -> None:
    payload = b"\x91" * 3000 + b"\x00"
    e = refused(auth, f"{b64(payload)}.{b64(key.sign(payload))}")
    assert e.code == "invalid_token"


@pytest.mark.parametrize(
    "token",
    [
        "",
        ".",
        "abc",
        "abc.",
        ".abc",
        "a.b.c",
        "ab+c.defg",
        "ab/c.defg",
        "abc!.defg",
        "abcde.fg",  # length 5 mod 4 == 1 is never base64
        "ab=c.defg",
        "ab===.defg",
        "\u00e9t\u00e9.defg",
        "YQ.AA",  # a signature of the wrong length
    ],
)
def test_malformed_token_text(auth: Authenticator, token: str) -> None:
    e = refused(auth, token) if token else None
    if e is not None:
        assert (e.status, e.code) == (401, "invalid_token")
    with pytest.raises(ApiError) as ei:
        parse_token(token)
    assert ei.value.code == "invalid_token"


def test_non_canonical_base64_refused(auth: Authenticator, mint: Mint) -> None:
    token = mint(permissions={"read": ["*"]})
    head, _, sig = token.partition(".")
    # 64 bytes -> 86 chars: the last char carries 2 unused bits; set one.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(sig[-1])
    assert last % 16 == 0
    forged = sig[:-1] + alphabet[last + 1]
    e = refused(auth, f"{head}.{forged}")
    assert e.code == "invalid_token"


def test_expired(auth: Authenticator, mint: Mint, clock: FakeClock) -> None:
    token = mint(ttl_ms=1000, permissions={"read": ["*"]})
    auth.authenticate(f"Bearer {token}", "demo")
    clock.advance(999)
    auth.authenticate(f"Bearer {token}", "demo")
    clock.advance(1)
    e = refused(auth, token)
    assert (e.status, e.code) == (401, "token_expired")


def test_other_namespace(auth: Authenticator, mint: Mint) -> None:
    e = refused(auth, mint(namespace="demo", permissions={"read": ["*"]}), ns="other")
    assert (e.status, e.code) == (403, "forbidden")
    assert "namespace" in e.message


def test_sign_claims_refuses_oversized(key: SigningKey) -> None:
    perms = V1Permissions(tuple("x" * 500 for _ in range(10)), ())
    with pytest.raises(ValueError):
        sign_claims(Claims("demo", 1, 2, perms), key)
