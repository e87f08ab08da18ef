"""Secret comparisons are constant-time.

Code paths are inspected (the admin check calls ``hmac.compare_digest``; no
``==``/``!=`` anywhere in the package touches a secret-looking value) and the
behaviour is tested: the admin check really goes through ``compare_digest``
on every request, answers right for every near miss, the token signature is
checked by libsodium, and webhook signatures are HMAC-SHA256 of the body.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import syncd
from syncd.auth import tokens as tokens_module
from syncd.auth.admin import AdminSecret
from syncd.auth.authenticator import Authenticator
from syncd.auth.tokens import SigningKey
from syncd.errors import ApiError
from syncd.webhooks import dispatcher
from syncd.webhooks.dispatcher import sign

PACKAGE = Path(syncd.__file__).parent
SECRET = "s3cret-admin-value-0123456789abcdef"
SECRETISH = re.compile(
    r"secret|signature|^sig$|_sig$|^sig_|token|digest|hmac|password|bearer", re.I
)


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return None


def _comparisons_of_secrets() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            if not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                continue
            for side in (node.left, *node.comparators):
                name = _name(side)
                # Lengths and ALL_CAPS constants (sizes) are not secrets.
                if name is None or name.isupper() or not SECRETISH.search(name):
                    continue
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_equality_comparison_touches_a_secret() -> None:
    assert _comparisons_of_secrets() == []


def test_the_scan_would_see_one() -> None:
    """The scan above is not vacuous: it flags the shape it looks for."""
    tree = ast.parse("if bearer == self._secret: pass")
    compare = next(n for n in ast.walk(tree) if isinstance(n, ast.Compare))
    assert any(
        _name(s) and SECRETISH.search(_name(s) or "") for s in (compare.left, *compare.comparators)
    )


def test_admin_check_source_uses_compare_digest() -> None:
    source = inspect.getsource(AdminSecret.matches)
    assert "hmac.compare_digest(" in source
    assert "==" not in source and "!=" not in source


def test_every_admin_check_goes_through_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recording(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    auth = Authenticator(SigningKey(b"\x01" * 32), AdminSecret(SECRET))
    assert auth.authenticate(f"Bearer {SECRET}", "app").root
    near_misses = [
        SECRET[:-1],  # a prefix
        SECRET + "x",  # longer
        SECRET[:-1] + "X",  # same length, last byte differs
        "X" + SECRET[1:],  # same length, first byte differs
        SECRET.upper(),
        SECRET + "\u00e9",
    ]
    for bearer in near_misses:
        with pytest.raises(ApiError) as info:
            auth.authenticate(f"Bearer {bearer}", "app")
        assert info.value.status == 401
    # One constant-time comparison per request, each against the secret; two
    # for a bearer that is not ASCII (as header bytes and as UTF-8 text, both
    # always made: syncd/auth/admin.py).
    assert len(calls) == 1 + len(near_misses) + 1
    assert all(secret == SECRET.encode() for _, secret in calls)


def test_token_signatures_are_checked_by_libsodium() -> None:
    """ed25519 verification (libsodium's crypto_sign_open) compares in constant
    time; nothing of ours compares signature bytes."""
    source = inspect.getsource(tokens_module.SigningKey.verify)
    assert "self._verify.verify(" in source
    key = SigningKey(b"\x02" * 32)
    signature = key.sign(b"payload")
    assert key.verify(b"payload", signature)
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    assert not key.verify(b"payload", flipped)
    assert not key.verify(b"payload!", signature)


def test_webhook_signature_is_hmac_sha256_of_the_body() -> None:
    body = b'{"ns":"app","crdt_id":"gc:x","seq":1}'
    expected = hmac.new(b"whsec", body, hashlib.sha256).hexdigest()
    assert sign(b"whsec", body) == expected
    assert sign(b"other", body) != expected  # keyed, not a bare hash
    assert sign(b"whsec", body + b" ") != expected
    assert "hmac.new(" in inspect.getsource(dispatcher.sign)
    assert "sign(self._key, body)" in inspect.getsource(dispatcher)
