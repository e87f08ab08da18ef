"""Bodies of the revert, restore, token-issue and revocation routes over a real
socket: a field given the wrong JSON type is 400 ``bad_request`` whose message
starts with the field's name, and nothing is done. ``null`` is no value of a
field the document types as a string or an integer (a revert's ``origin`` or
``client_id``, its seqs, an ``op_id``): a revert of ``{"client_id": 8,
"origin": null}`` was taken as client 8's ops alone, whatever origin the
caller had meant to narrow them to. Booleans and fractions are no integers.
Only ``ttl_ms`` and ``before_ms`` take ``null`` (documented: the default).
An integer written ``1.0`` is an integer in these bodies, as JSON Schema's
``integer`` says (docs/http-api.md, Conventions): not tested here as a fault."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op

CRDT = "/v1/namespaces/app/crdts/pn:c"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


def _refused(r: httpx.Response, field: str) -> None:
    assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text
    assert r.json()["message"].startswith(f"{field}:"), r.text


async def _seq(client: httpx.AsyncClient, h: dict[str, str]) -> int:
    seq: int = (await client.get(CRDT, headers=h)).json()["seq"]
    return seq


REVERT_CASES: list[tuple[dict[str, Any], str]] = [
    ({"client_id": 7, "origin": None}, "origin"),
    ({"origin": "o", "client_id": None}, "client_id"),
    ({"client_id": 7, "since_seq": None}, "since_seq"),
    ({"client_id": 7, "until_seq": None}, "until_seq"),
    ({"client_id": 7, "op_id": None}, "op_id"),
    ({"client_id": True}, "client_id"),
    ({"client_id": 7.5}, "client_id"),
    ({"client_id": 7, "origin": 5}, "origin"),
    ({"client_id": 7, "since_seq": True}, "since_seq"),
    ({"client_id": 7, "since_seq": 1.5}, "since_seq"),
    ({"client_id": 7, "until_seq": False}, "until_seq"),
    ({"client_id": 7, "op_id": True}, "op_id"),
]


@pytest.mark.parametrize(
    ("body", "field"), REVERT_CASES, ids=[f"revert-{i}" for i in range(len(REVERT_CASES))]
)
async def test_revert_refuses_a_field_of_the_wrong_type(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    h = await issue(client)
    assert (await op(client, h, "pn:c", {"op": "increment"}, query="?origin=o")).status_code == 200
    _refused(await client.post(f"{CRDT}/revert", json=body, headers=h), field)
    assert await _seq(client, h) == 1  # nothing taken back


RESTORE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"seq": None}, "seq"),
    ({"seq": True}, "seq"),
    ({"seq": 0.5}, "seq"),
    ({"seq": 0, "op_id": None}, "op_id"),
    ({"seq": 0, "op_id": False}, "op_id"),
]


@pytest.mark.parametrize(
    ("body", "field"), RESTORE_CASES, ids=[f"restore-{i}" for i in range(len(RESTORE_CASES))]
)
async def test_restore_refuses_a_field_of_the_wrong_type(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    h = await issue(client)
    assert (await op(client, h, "pn:c", {"op": "increment"})).status_code == 200
    _refused(await client.post(f"{CRDT}/restore", json=body, headers=h), field)
    assert await _seq(client, h) == 1  # nothing restored


PERMISSIONS = {"read": ["*"], "write": [], "admin": False}
ISSUE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/namespaces/app/tokens", {"client_id": None, "permissions": PERMISSIONS}, "client_id"),
    ("/v1/namespaces/app/tokens", {"client_id": True, "permissions": PERMISSIONS}, "client_id"),
    ("/v1/namespaces/app/tokens", {"client_id": 1.5, "permissions": PERMISSIONS}, "client_id"),
    (
        "/v1/namespaces/app/tokens",
        {"client_id": 1, "ttl_ms": True, "permissions": PERMISSIONS},
        "ttl_ms",
    ),
    (
        "/v1/namespaces/app/tokens",
        {"client_id": 1, "ttl_ms": 1000.5, "permissions": PERMISSIONS},
        "ttl_ms",
    ),
    ("/v1/tokens", {"namespace": None, "client_id": 1, "permissions": PERMISSIONS}, "namespace"),
    (
        "/v1/tokens",
        {"namespace": "app", "client_id": False, "permissions": PERMISSIONS},
        "client_id",
    ),
    (
        "/v1/tokens",
        {"namespace": "app", "client_id": 1, "ttl_ms": False, "permissions": PERMISSIONS},
        "ttl_ms",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "field"), ISSUE_CASES, ids=[f"issue-{i}" for i in range(len(ISSUE_CASES))]
)
async def test_token_issue_refuses_a_field_of_the_wrong_type(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], field: str
) -> None:
    _refused(await client.post(path, json=body, headers=ADMIN_HEADERS), field)


REVOKE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"client_id": None}, "client_id"),
    ({"client_id": True}, "client_id"),
    ({"client_id": 1.5}, "client_id"),
    ({"client_id": 1, "before_ms": True}, "before_ms"),
    ({"client_id": 1, "before_ms": 0.5}, "before_ms"),
]


@pytest.mark.parametrize(
    ("body", "field"), REVOKE_CASES, ids=[f"revoke-{i}" for i in range(len(REVOKE_CASES))]
)
async def test_revocation_refuses_a_field_of_the_wrong_type(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    path = "/v1/namespaces/app/revocations"
    _refused(await client.post(path, json=body, headers=ADMIN_HEADERS), field)
    assert (await client.get(path, headers=ADMIN_HEADERS)).json()["revocations"] == []
