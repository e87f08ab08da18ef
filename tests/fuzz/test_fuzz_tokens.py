"""Token fuzzing: random edits of valid tokens, and random claims maps signed
with the real key (so the claims parser, not the signature check, meets them).

The pure authenticator sees many cases cheaply: every outcome is a principal
or an ApiError of the auth codes, and a principal survives every decision and
``tokens/me``. A smaller share goes to the running server (header and
``?token=`` on a WebSocket upgrade): no 500, nothing in the log.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncd.auth.admin import AdminSecret
from syncd.auth.authenticator import Authenticator, Principal
from syncd.auth.issue import describe
from syncd.errors import ApiError
from tests.conftest import ADMIN
from tests.fuzz.conftest import KEY, FuzzTarget, sample_tokens
from tests.fuzz.strategies import GOOD_IDS, TYPES, claims_map, mutated_token
from tests.fuzz.support import (
    check_healthy,
    check_response,
    examples,
    http_exchange,
    parse_responses,
    upgrade_request,
)

AUTH_STATUSES = {401: {"missing_token", "invalid_token", "token_expired"}, 403: {"forbidden"}}
PURE = settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
OVER_HTTP = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
TOKENS = sample_tokens()


def signed(claims: Any) -> str:
    """``claims`` packed and signed with the server's key, encoded as a token."""
    payload = msgpack.packb(claims, use_bin_type=True)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

    return f"{b64(payload)}.{b64(KEY.sign(payload))}"


any_token = st.one_of(mutated_token(TOKENS), claims_map.map(signed))


def authenticator() -> Authenticator:
    return Authenticator(KEY, AdminSecret(ADMIN), default_rate_limit=10**6)


def exercise(auth: Authenticator, principal: Principal) -> None:
    """Every decision a request could ask of a principal: answers or 403, nothing else."""
    for crdt_id in [*GOOD_IDS[:3], "u:7:x", "x" * 256]:
        auth.can_read(principal, crdt_id)
        for type_name, mask in zip(TYPES, (1, 2, 3, 1, 1, 2, 15), strict=True):
            try:
                auth.check_write(principal, crdt_id, type_name, mask)
            except ApiError as exc:
                assert (exc.status, exc.code) == (403, "forbidden")
    auth.is_admin(principal, "app")
    auth.check_expiry(principal)
    json.dumps(describe(principal))


def outcome(auth: Authenticator, header: str | None, ns: str, query: str | None = None) -> str:
    try:
        principal = auth.authenticate(header, ns, query_token=query)
    except ApiError as exc:
        assert exc.code in AUTH_STATUSES.get(exc.status, set()), (exc.status, exc.code)
        return exc.code
    exercise(auth, principal)
    return "ok"


@PURE
@given(token=any_token, ns=st.sampled_from(["app", "other", "x"]))
def test_random_tokens_are_principals_or_auth_errors(token: str, ns: str) -> None:
    auth = authenticator()
    outcome(auth, "Bearer " + token, ns)
    outcome(auth, None, ns, query=token)
    outcome(auth, "Bearer " + token, ns)  # the cached path too


@PURE
@given(claims=claims_map)
def test_signed_claims_of_any_shape(claims: Any) -> None:
    auth = authenticator()
    result = outcome(auth, "Bearer " + signed(claims), "app")
    if result == "ok":
        # Only a claims map of exactly the four keys, and optionally issued_at, gets through.
        assert isinstance(claims, dict)
        four = {"namespace", "client_id", "expires_at", "permissions"}
        assert set(claims) in (four, four | {"issued_at"})


def test_tokens_over_http(fuzz_target: FuzzTarget) -> None:
    port = fuzz_target.port
    logs = fuzz_target.logs
    logs.take()

    @OVER_HTTP
    @given(token=any_token, route=st.sampled_from(["me", "op", "read", "ws"]))
    def case(token: str, route: str) -> None:
        if route == "ws":
            quoted = urllib.parse.quote(token, safe="")
            raw = upgrade_request("app", quoted, b"Connection-Extra: x\r\n")
            methods = ["GET"]
        else:
            header = b"Authorization: Bearer " + token.encode("utf-8", "surrogatepass") + b"\r\n"
            if route == "me":
                head = b"GET /v1/namespaces/app/tokens/me HTTP/1.1\r\n"
                body = b""
            elif route == "read":
                head = b"GET /v1/namespaces/app/crdts/gc:f HTTP/1.1\r\n"
                body = b""
            else:
                head = b"POST /v1/namespaces/app/crdts/gc:tok/ops HTTP/1.1\r\n"
                body = b'{"op":"increment"}'
            raw = (
                head
                + b"Host: t\r\n"
                + header
                + b"Content-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            methods = ["GET"]
        for response in parse_responses(http_exchange(port, raw), methods):
            check_response(response)
            if response.status >= 400:
                code = json.loads(response.body)["error"]
                assert response.status in (400, 401, 403, 404), (response.status, code)
        problems = logs.take()
        assert not problems, problems
        check_healthy(port)

    case()


@pytest.mark.parametrize("token", TOKENS[:5])
def test_the_seed_tokens_are_valid(token: str) -> None:
    """The mutations start from tokens that do authenticate (else they prove little)."""
    assert outcome(authenticator(), "Bearer " + token, "app") == "ok"
