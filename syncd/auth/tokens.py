"""The token codec: claims <-> ``base64url(msgpack) "." base64url(ed25519 sig)``.

Everything here is pure (no clock, no I/O). Decoding is strict: a token is
untrusted input of attacker-chosen shape, so every failure, whatever its cause
(bad base64, non-msgpack, trailing bytes, a bool where an int belongs, an
oversized token, a bad signature), becomes one answer: 401 ``invalid_token``.
The signature is checked before the claims are parsed, so the parser only ever
sees bytes this service signed.

Claims: ``namespace``, ``client_id``, ``expires_at`` and ``permissions``, and
since revocation (docs/permissions.md#revoking-tokens) ``issued_at``. A token
without ``issued_at`` (issued before it existed) still verifies and counts as
issued at 0, so every revocation of its client refuses it (but one with a
``before_ms`` of 0, before which nothing is issued).

Keys: a token verifies under the current key or one of the previous keys
(``SERVICE_PREVIOUS_SIGNING_KEYS``, for rotation). A key is named by its
*key id*, the first :data:`KEY_ID_HEX` hex characters of its public key: not
secret, stable across restarts, and what ``tokens/me`` reports.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import nacl.exceptions
import nacl.signing

from syncd.auth.permissions import Permissions, PermissionsError, parse_permissions
from syncd.errors import ApiError
from syncd.ids import NAMESPACE_RE

MAX_TOKEN_BYTES = 4096
"""Characters in a token. Far above any sane permission list, and it bounds the
work (and memory) an unauthenticated caller can make us spend on one token."""

MAX_CLIENT_ID = 2**53 - 1
"""Client ids stay exact in JavaScript numbers (the JS client holds them as numbers)."""

MAX_EXPIRES_AT = 2**63 - 1

SEED_BYTES = 32
SIGNATURE_BYTES = 64

_B64URL_RE = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_HEX_KEY_RE = re.compile(r"[0-9a-fA-F]{64}")
_CLAIM_KEYS = frozenset({"namespace", "client_id", "expires_at", "permissions"})
_CLAIM_KEYS_ISSUED = _CLAIM_KEYS | {"issued_at"}

KEY_ID_HEX = 8
"""Hex characters of the public key that name a signing key (32 bits: enough
to tell apart the handful of keys a deployment holds at once)."""

# msgpack limits: nothing inside a token can be longer than the token itself.
_UNPACK_LIMITS: dict[str, Any] = {
    "raw": False,
    "strict_map_key": True,
    "use_list": True,
    "max_str_len": MAX_TOKEN_BYTES,
    "max_bin_len": 0,
    "max_ext_len": 0,
    "max_array_len": MAX_TOKEN_BYTES,
    "max_map_len": MAX_TOKEN_BYTES,
}


def valid_namespace(ns: object) -> bool:
    return isinstance(ns, str) and NAMESPACE_RE.fullmatch(ns) is not None


def invalid_token(message: str) -> ApiError:
    return ApiError(401, "invalid_token", message)


class SigningKey:
    """An ed25519 key pair built from a 32-byte seed (``SERVICE_SIGNING_KEY``)."""

    __slots__ = ("_signing", "_verify", "key_id", "seed")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != SEED_BYTES:
            raise ValueError(f"a signing key seed is {SEED_BYTES} bytes")
        self.seed = bytes(seed)
        self._signing = nacl.signing.SigningKey(self.seed)
        self._verify = self._signing.verify_key
        self.key_id = bytes(self._verify).hex()[:KEY_ID_HEX]
        """The first :data:`KEY_ID_HEX` hex characters of the public key."""

    @classmethod
    def from_hex(cls, text: str) -> SigningKey:
        """From 64 hex characters; ValueError (without the value) otherwise."""
        if not isinstance(text, str) or _HEX_KEY_RE.fullmatch(text) is None:
            raise ValueError("SERVICE_SIGNING_KEY must be 64 hexadecimal characters")
        return cls(bytes.fromhex(text))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(os.urandom(SEED_BYTES))

    def hex(self) -> str:
        return self.seed.hex()

    def sign(self, data: bytes) -> bytes:
        return bytes(self._signing.sign(data).signature)

    def verify(self, data: bytes, signature: bytes) -> bool:
        try:
            self._verify.verify(data, signature)
        except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
            return False
        return True


def keygen() -> str:
    """A new ``SERVICE_SIGNING_KEY``: 64 hex characters (a random 32-byte seed)."""
    return os.urandom(SEED_BYTES).hex()


@dataclass(frozen=True, slots=True)
class Claims:
    namespace: str
    client_id: int
    expires_at: int
    """Expiry, ms since the epoch; the token is expired once ``now >= expires_at``."""
    permissions: Permissions
    issued_at: int | None = None
    """When it was issued, ms since the epoch; None: a token from before the
    claim existed (revocations count it as issued at 0)."""

    def to_map(self) -> dict[str, Any]:
        claims: dict[str, Any] = {
            "namespace": self.namespace,
            "client_id": self.client_id,
            "expires_at": self.expires_at,
            "permissions": self.permissions.to_map(),
        }
        if self.issued_at is not None:
            claims["issued_at"] = self.issued_at
        return claims


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    if _B64URL_RE.fullmatch(text) is None:
        raise invalid_token(f"token {what} is not base64url")
    bare = text.rstrip("=")
    if len(bare) % 4 == 1 or (len(text) != len(bare) and len(text) % 4 != 0):
        raise invalid_token(f"token {what} has a bad base64url length")
    try:
        data = base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))
    except (binascii.Error, ValueError):
        raise invalid_token(f"token {what} is not base64url") from None
    # One token, one spelling: refuse encodings with stray low bits set.
    if _b64encode(data) != bare:
        raise invalid_token(f"token {what} is not canonical base64url")
    return data


def encode_claims(claims: Claims) -> bytes:
    return msgpack.packb(claims.to_map(), use_bin_type=True)


def sign_claims(claims: Claims, key: SigningKey) -> str:
    """The token for ``claims``. ValueError if it would exceed MAX_TOKEN_BYTES."""
    payload = encode_claims(claims)
    token = f"{_b64encode(payload)}.{_b64encode(key.sign(payload))}"
    if len(token) > MAX_TOKEN_BYTES:
        raise ValueError(f"the token would be longer than {MAX_TOKEN_BYTES} characters")
    return token


def split_token(token: str) -> tuple[bytes, bytes]:
    """``(payload, signature)`` bytes of a well-formed token (not verified)."""
    if not isinstance(token, str):
        raise invalid_token("token must be a string")
    if len(token) > MAX_TOKEN_BYTES:
        raise invalid_token(f"token is longer than {MAX_TOKEN_BYTES} characters")
    payload_b64, sep, sig_b64 = token.partition(".")
    if not sep or not payload_b64 or "." in sig_b64:
        raise invalid_token("token must be two base64url parts joined by '.'")
    payload = _b64decode(payload_b64, "payload")
    signature = _b64decode(sig_b64, "signature")
    if len(signature) != SIGNATURE_BYTES:
        raise invalid_token("token signature has the wrong length")
    return payload, signature


def _claim_int(claims: dict[str, Any], name: str, maximum: int) -> int:
    value = claims[name]
    if type(value) is not int or not 0 <= value <= maximum:
        raise invalid_token(f"token claim {name} must be an integer from 0 to {maximum}")
    return value


def decode_claims(payload: bytes) -> Claims:
    """Parse the msgpack claims map, strictly."""
    try:
        obj = msgpack.unpackb(payload, **_UNPACK_LIMITS)
    except Exception:
        # msgpack raises a zoo of types here (ExtraData, FormatError, StackError,
        # ValueError for limits, UnicodeDecodeError, ...); all mean "not ours".
        raise invalid_token("token payload is not a msgpack claims map") from None
    if not isinstance(obj, dict):
        raise invalid_token("token payload is not a msgpack claims map")
    keys = set(obj)
    if keys != _CLAIM_KEYS and keys != _CLAIM_KEYS_ISSUED:
        raise invalid_token(
            "token claims must be exactly namespace, client_id, expires_at, permissions"
            " and optionally issued_at"
        )
    namespace = obj["namespace"]
    if not valid_namespace(namespace):
        raise invalid_token("token claim namespace is not a valid namespace")
    client_id = _claim_int(obj, "client_id", MAX_CLIENT_ID)
    expires_at = _claim_int(obj, "expires_at", MAX_EXPIRES_AT)
    issued_at = _claim_int(obj, "issued_at", MAX_EXPIRES_AT) if "issued_at" in obj else None
    try:
        permissions = parse_permissions(obj["permissions"])
    except PermissionsError as e:
        raise invalid_token(f"token claim {e}") from None
    return Claims(namespace, client_id, expires_at, permissions, issued_at)


def parse_token(token: str) -> tuple[Claims, bytes]:
    """Claims and signature of a token, *without* checking the signature (for
    clients, which do not hold the key, to pre-validate their token)."""
    payload, signature = split_token(token)
    return decode_claims(payload), signature


def verify_token(token: str, key: SigningKey) -> tuple[Claims, bytes]:
    """Claims and signature of a token signed by ``key``; 401 otherwise."""
    claims, signature, _ = verify_token_any(token, (key,))
    return claims, signature


def verify_token_any(token: str, keys: Sequence[SigningKey]) -> tuple[Claims, bytes, SigningKey]:
    """Claims, signature and signing key of a token signed by one of ``keys``
    (tried in order: the current key first); 401 otherwise.

    A token names no key, and nothing short of the check tells which key made
    an ed25519 signature, so a bad one costs one check per key: at most
    1 + ``syncd.config.MAX_PREVIOUS_SIGNING_KEYS`` (docs/permissions.md#rotating-the-signing-key)."""
    payload, signature = split_token(token)
    for key in keys:
        if key.verify(payload, signature):
            return decode_claims(payload), signature, key
    raise invalid_token(
        "token signature is invalid: another key signed it (a server started without "
        "SERVICE_SIGNING_KEY makes a new key at every start, and the tokens of earlier "
        "starts then fail)"
    )
