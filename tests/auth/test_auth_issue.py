"""Token issuing: both endpoint bodies (every 400) and ``tokens/me`` (``syncd token``: tests/cli/test_token.py)."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.auth import (
    DEFAULT_TTL_MS,
    ROOT,
    Authenticator,
    SigningKey,
    describe,
    issue,
    issue_token,
    parse_issue_body,
    verify_token,
)
from syncd.auth.permissions import Rule, V1Permissions, V2Permissions
from syncd.errors import ApiError
from tests.auth.support import FakeClock

MAX_TTL = 30 * 24 * 3600 * 1000
NOW = 1_767_225_600_000
"""The issue time the bodies are parsed at (rule expiries are compared to it)."""
KEY_HEX = "11" * 32
P = {"read": ["*"], "write": []}


def bad(body: Any, ns: str | None = "demo", max_ttl: int = MAX_TTL) -> ApiError:
    with pytest.raises(ApiError) as ei:
        parse_issue_body(body, ns, max_ttl, NOW)
    assert ei.value.status == 400
    return ei.value


def test_ns_body_v1_defaults() -> None:
    req = parse_issue_body({"client_id": 7, "permissions": {"read": ["*"]}}, "demo", MAX_TTL, NOW)
    assert req.namespace == "demo"
    assert req.client_id == 7
    assert req.ttl_ms == DEFAULT_TTL_MS == 3_600_000
    assert req.permissions == V1Permissions(("*",), (), False)


def test_ns_body_v2() -> None:
    body = {
        "client_id": 0,
        "ttl_ms": 5000,
        "rules": {"r": [{"p": "*"}], "w": [{"p": "or:cart-{clientId}", "o": 3, "e": 10}], "rl": 9},
    }
    req = parse_issue_body(body, "demo", MAX_TTL, NOW)
    assert req.ttl_ms == 5000
    assert req.permissions == V2Permissions(
        (Rule("*"),), (Rule("or:cart-{clientId}", 3, 10),), rate_limit=9
    )


def test_integers_written_with_a_fraction_of_zero_are_integers() -> None:
    """JSON Schema's ``integer`` admits ``2.0``, and so does a request body
    (not ops, and not token claims): the values come out as ints."""
    body = {
        "client_id": 7.0,
        "ttl_ms": 5000.0,
        "rules": {"v": 2.0, "r": [], "w": [{"p": "*", "o": 3.0, "e": 1.8e12}], "rl": 9.0},
    }
    req = parse_issue_body(body, "demo", MAX_TTL, NOW)
    assert (req.client_id, req.ttl_ms) == (7, 5000)
    assert type(req.client_id) is int and type(req.ttl_ms) is int
    assert req.permissions == V2Permissions((), (Rule("*", 3, 1_800_000_000_000),), rate_limit=9)
    rule = req.permissions.write[0]  # type: ignore[union-attr]
    assert type(rule.mask) is int and type(rule.expires_at) is int
    assert type(req.permissions.rate_limit) is int  # type: ignore[union-attr]
    assert bad({"client_id": 7.5, "permissions": {}}).code == "bad_request"
    assert bad({"client_id": True, "permissions": {}}).code == "bad_request"


def test_ns_body_v2_with_explicit_v() -> None:
    req = parse_issue_body(
        {"client_id": 1, "rules": {"v": 2, "r": [{"p": "*"}], "w": []}}, "demo", MAX_TTL, NOW
    )
    assert isinstance(req.permissions, V2Permissions)


def test_global_body() -> None:
    body = {
        "namespace": "team.a-1",
        "client_id": 3,
        "permissions": {"read": ["*"], "write": ["gc:*"], "admin": True},
    }
    req = parse_issue_body(body, None, MAX_TTL, NOW)
    assert req.namespace == "team.a-1"
    assert req.permissions == V1Permissions(("*",), ("gc:*",), True)


def test_ttl_at_the_maximum_is_allowed() -> None:
    req = parse_issue_body({"client_id": 1, "ttl_ms": 1000, "permissions": P}, "demo", 1000, NOW)
    assert req.ttl_ms == 1000
    e = bad({"client_id": 1, "ttl_ms": 1001, "permissions": P}, max_ttl=1000)
    assert e.code == "bad_request"
    assert "1000" in e.message


BAD_NS_BODIES: list[tuple[str, Any]] = [
    ("not an object", [1, 2]),
    ("string body", "client_id=1"),
    ("null body", None),
    ("unknown field", {"client_id": 1, "permissions": P, "permision": P}),
    ("namespace in ns form", {"namespace": "demo", "client_id": 1, "permissions": P}),
    ("client_id missing", {"permissions": P}),
    ("client_id bool", {"client_id": True, "permissions": P}),
    ("client_id string", {"client_id": "1", "permissions": P}),
    ("client_id float", {"client_id": 1.5, "permissions": P}),
    ("client_id negative", {"client_id": -1, "permissions": P}),
    ("client_id 2^53", {"client_id": 2**53, "permissions": P}),
    ("ttl zero", {"client_id": 1, "ttl_ms": 0, "permissions": P}),
    ("ttl negative", {"client_id": 1, "ttl_ms": -5, "permissions": P}),
    ("ttl over max", {"client_id": 1, "ttl_ms": MAX_TTL + 1, "permissions": P}),
    ("ttl float", {"client_id": 1, "ttl_ms": 1000.5, "permissions": P}),
    ("ttl bool", {"client_id": 1, "ttl_ms": True, "permissions": P}),
    ("ttl string", {"client_id": 1, "ttl_ms": "1000", "permissions": P}),
    ("both", {"client_id": 1, "permissions": P, "rules": {"r": [], "w": []}}),
    ("neither", {"client_id": 1}),
    ("permissions not object", {"client_id": 1, "permissions": ["*"]}),
    ("read not list", {"client_id": 1, "permissions": {"read": "*"}}),
    ("read entry int", {"client_id": 1, "permissions": {"read": [1]}}),
    ("write entry null", {"client_id": 1, "permissions": {"write": [None]}}),
    ("admin string", {"client_id": 1, "permissions": {"admin": "true"}}),
    ("permissions unknown key", {"client_id": 1, "permissions": {"reads": ["*"]}}),
    ("too many globs", {"client_id": 1, "permissions": {"read": ["a"] * 65}}),
    ("glob too long", {"client_id": 1, "permissions": {"read": ["a" * 513]}}),
    ("rules not object", {"client_id": 1, "rules": [{"p": "*"}]}),
    ("r not list", {"client_id": 1, "rules": {"r": {"p": "*"}}}),
    ("rule not object", {"client_id": 1, "rules": {"r": ["*"]}}),
    ("rule missing p", {"client_id": 1, "rules": {"w": [{"o": 1}]}}),
    ("rule p int", {"client_id": 1, "rules": {"w": [{"p": 5}]}}),
    ("rule o string", {"client_id": 1, "rules": {"w": [{"p": "*", "o": "0x01"}]}}),
    ("rule o 256", {"client_id": 1, "rules": {"w": [{"p": "*", "o": 256}]}}),
    ("rule o negative", {"client_id": 1, "rules": {"w": [{"p": "*", "o": -1}]}}),
    ("rule o float", {"client_id": 1, "rules": {"w": [{"p": "*", "o": 1.5}]}}),
    ("rule e negative", {"client_id": 1, "rules": {"w": [{"p": "*", "e": -1}]}}),
    ("rule e bool", {"client_id": 1, "rules": {"w": [{"p": "*", "e": False}]}}),
    ("rule unknown key", {"client_id": 1, "rules": {"w": [{"p": "*", "m": 1}]}}),
    ("rl zero", {"client_id": 1, "rules": {"r": [], "rl": 0}}),
    ("rl negative", {"client_id": 1, "rules": {"r": [], "rl": -3}}),
    ("rl float", {"client_id": 1, "rules": {"r": [], "rl": 2.5}}),
    ("rl too big", {"client_id": 1, "rules": {"r": [], "rl": 10**7}}),
    ("v wrong", {"client_id": 1, "rules": {"v": 1, "r": []}}),
    ("rules unknown key", {"client_id": 1, "rules": {"r": [], "read": []}}),
    ("too many rules", {"client_id": 1, "rules": {"w": [{"p": "a"}] * 65}}),
]


@pytest.mark.parametrize(("name", "body"), BAD_NS_BODIES, ids=[n for n, _ in BAD_NS_BODIES])
def test_ns_body_400(name: str, body: Any) -> None:
    e = bad(body)
    assert e.code == "bad_request", name
    assert e.message


BAD_GLOBAL_BODIES: list[tuple[str, Any, str]] = [
    ("namespace missing", {"client_id": 1, "permissions": P}, "bad_request"),
    ("namespace int", {"namespace": 1, "client_id": 1, "permissions": P}, "bad_request"),
    (
        "namespace syntax",
        {"namespace": "../x", "client_id": 1, "permissions": P},
        "invalid_namespace",
    ),
    ("namespace empty", {"namespace": "", "client_id": 1, "permissions": P}, "invalid_namespace"),
    (
        "namespace too long",
        {"namespace": "a" * 129, "client_id": 1, "permissions": P},
        "invalid_namespace",
    ),
    ("rules (V1 only)", {"namespace": "d", "client_id": 1, "rules": {"r": []}}, "bad_request"),
    ("permissions missing", {"namespace": "d", "client_id": 1}, "bad_request"),
    ("client_id missing", {"namespace": "d", "permissions": P}, "bad_request"),
    (
        "ttl over max",
        {"namespace": "d", "client_id": 1, "permissions": P, "ttl_ms": MAX_TTL + 1},
        "bad_request",
    ),
]


@pytest.mark.parametrize(
    ("name", "body", "code"), BAD_GLOBAL_BODIES, ids=[n for n, _, _ in BAD_GLOBAL_BODIES]
)
def test_global_body_400(name: str, body: Any, code: str) -> None:
    assert bad(body, ns=None).code == code, name


GRANTS_NOTHING: list[tuple[str, Any]] = [
    ("empty V1", {"permissions": {}}),
    ("empty V1 lists", {"permissions": {"read": [], "write": [], "admin": False}}),
    ("only empty globs", {"permissions": {"read": [""], "write": [""]}}),
    ("empty rules", {"rules": {}}),
    ("empty rule lists", {"rules": {"r": [], "w": [], "rl": 5}}),
    ("w allows no op", {"rules": {"w": [{"p": "*", "o": 0}, {"p": "gc:*", "o": 0}]}}),
    ("w bits of no op", {"rules": {"w": [{"p": "gc:*", "o": 0xF0}]}}),
    ("every rule expired", {"rules": {"r": [{"p": "*", "e": NOW}], "w": [{"p": "*", "e": 1}]}}),
    ("e in seconds", {"rules": {"r": [{"p": "*", "e": NOW // 1000 + 3600}]}}),
    ("empty pattern", {"rules": {"r": [{"p": ""}], "w": [{"p": ""}]}}),
    ("behind a '*' that allows none", {"rules": {"w": [{"p": "**", "o": 0}, {"p": "gc:*"}]}}),
]

NARROW: list[tuple[str, Any]] = [
    ("V1 one read glob", {"permissions": {"read": ["gc:one"]}}),
    ("V1 one write glob", {"permissions": {"write": ["or:cart-9"]}}),
    ("V1 admin only", {"permissions": {"admin": True}}),
    ("one r rule", {"rules": {"r": [{"p": "gc:one"}]}}),
    ("one r rule with o 0", {"rules": {"r": [{"p": "*", "o": 0}]}}),
    ("r rule until later", {"rules": {"r": [{"p": "*", "e": NOW + 1}]}}),
    ("one w rule", {"rules": {"w": [{"p": "or:cart-{clientId}", "o": 1}]}}),
    ("w rule, tree delete only", {"rules": {"w": [{"p": "tr:*", "o": 0x08}]}}),
    ("deny first, then allow", {"rules": {"w": [{"p": "gc:*", "o": 0}, {"p": "*"}]}}),
    ("'*' deny until e", {"rules": {"w": [{"p": "*", "o": 0, "e": NOW + 1}, {"p": "gc:*"}]}}),
    ("expired, then live", {"rules": {"w": [{"p": "*", "e": 1}, {"p": "gc:*", "o": 1}]}}),
]


@pytest.mark.parametrize("route_ns", ["demo", None])
def test_permissions_that_grant_nothing_are_refused(route_ns: str | None) -> None:
    """An issue body whose token could do nothing at all is 400, naming the
    field; a narrow one (one glob, one rule, one op bit) is issued."""
    base: dict[str, Any] = {"client_id": 1} if route_ns else {"namespace": "d", "client_id": 1}
    for name, grant in GRANTS_NOTHING:
        if route_ns is None and "rules" in grant:
            continue  # POST /v1/tokens takes V1 permissions only
        message = bad({**base, **grant}, ns=route_ns).message
        field = "permissions" if "permissions" in grant else "rules"
        assert message.startswith(f"{field}: the token would grant nothing: "), (name, message)
    for name, grant in NARROW:
        if route_ns is None and "rules" in grant:
            continue
        request = parse_issue_body({**base, **grant}, route_ns, MAX_TTL, NOW)
        assert request.client_id == 1, name


def test_messages_name_the_field_first() -> None:
    """Every issue-body message is ``field: problem``, as the API's others."""
    limit = 2**53 - 1
    for body, message in [
        ([1], "body: must be a JSON object"),
        ({"permissions": P}, f"client_id: an integer from 0 to {limit} is required"),
        ({"client_id": "1", "permissions": P}, f"client_id: must be an integer from 0 to {limit}"),
        ({"client_id": -1, "permissions": P}, f"client_id: must be an integer from 0 to {limit}"),
        (
            {"client_id": 2**53, "permissions": P},
            f"client_id: must be an integer from 0 to {limit}",
        ),
        ({"client_id": 1, "ttl_ms": "9", "permissions": P}, "ttl_ms: must be an integer"),
        ({"client_id": 1, "ttl_ms": 0, "permissions": P}, "ttl_ms: must be positive"),
        (
            {"client_id": 1, "ttl_ms": MAX_TTL + 1, "permissions": P},
            f"ttl_ms: must be at most {MAX_TTL} (SERVICE_MAX_TOKEN_TTL_MS)",
        ),
    ]:
        assert bad(body).message == message, body
    assert bad({"client_id": 1, "permissions": P}, ns=None).message == (
        "namespace: a string is required"
    )


def test_bad_path_namespace() -> None:
    assert bad({"client_id": 1, "permissions": P}, ns="-bad").code == "invalid_namespace"


def test_oversized_token_is_400(key: SigningKey) -> None:
    req = parse_issue_body(
        {"client_id": 1, "permissions": {"read": ["x" * 500] * 20}}, "demo", MAX_TTL, NOW
    )
    with pytest.raises(ApiError) as ei:
        issue(key, req, 0)
    assert (ei.value.status, ei.value.code) == (400, "bad_request")


def test_issue_and_verify(key: SigningKey) -> None:
    req = parse_issue_body({"client_id": 5, "ttl_ms": 1234, "permissions": P}, "demo", MAX_TTL, NOW)
    claims, _ = verify_token(issue(key, req, 1_000_000), key)
    assert (claims.namespace, claims.client_id, claims.expires_at) == ("demo", 5, 1_001_234)
    assert claims.permissions == req.permissions


def test_issue_token_helper(key: SigningKey) -> None:
    t = issue_token(key, namespace="n", client_id=1, ttl_ms=10, admin=True, now_ms=0)
    assert verify_token(t, key)[0].permissions == V1Permissions((), (), True)
    t = issue_token(
        key,
        namespace="n",
        client_id=1,
        ttl_ms=10,
        permissions={"read": ["*"]},
        admin=True,
        now_ms=0,
    )
    assert verify_token(t, key)[0].permissions == V1Permissions(("*",), (), True)
    perms = V2Permissions((Rule("*"),), (), 4)
    t = issue_token(key, namespace="n", client_id=1, ttl_ms=10, rules=perms, now_ms=0)
    assert verify_token(t, key)[0].permissions == perms
    for kw in (
        {"permissions": P, "rules": {"r": []}},
        {"rules": {"r": []}, "admin": True},
        {"rules": {"r": "*"}},
        {"ttl_ms": 0},
        {"client_id": -1},
        {"namespace": "/"},
    ):
        args: dict[str, Any] = {"namespace": "n", "client_id": 1, "ttl_ms": 10, "now_ms": 0, **kw}
        with pytest.raises(ApiError) as ei:
            issue_token(key, **args)
        assert ei.value.status == 400, kw


def test_describe_v2_keeps_placeholder(
    auth: Authenticator, key: SigningKey, clock: FakeClock
) -> None:
    rules = {"r": [{"p": "*"}], "w": [{"p": "or:cart-{clientId}", "o": 1, "e": 99}], "rl": 5}
    token = issue_token(
        key, namespace="demo", client_id=42, ttl_ms=1000, rules=rules, now_ms=clock.now
    )
    p = auth.authenticate(f"Bearer {token}", "demo")
    assert describe(p) == {
        "namespace": "demo",
        "client_id": 42,
        "expires_at": clock.now + 1000,
        "issued_at": clock.now,
        "key_id": key.key_id,
        "permissions": {
            "v": 2,
            "r": [{"p": "*"}],
            "w": [{"p": "or:cart-{clientId}", "o": 1, "e": 99}],
            "rl": 5,
        },
    }


def test_describe_v1_and_root(auth: Authenticator, key: SigningKey, clock: FakeClock) -> None:
    token = issue_token(
        key,
        namespace="demo",
        client_id=1,
        ttl_ms=1000,
        permissions={"read": ["gc:*"]},
        now_ms=clock.now,
    )
    p = auth.authenticate(f"Bearer {token}", "demo")
    assert describe(p)["permissions"] == {"read": ["gc:*"], "write": [], "admin": False}
    assert describe(ROOT) == {"admin": True, "root": True}
