"""Revoking tokens over HTTP on a real server (docs/permissions.md#revoking-tokens):
refused requests, the routes, an event stream that ends, the embedded store's
file across a restart, and tokens from before ``issued_at`` existed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.auth.permissions import V1Permissions
from syncd.auth.revocations import MAX_CLIENT_ID, REVOCATIONS_FILE
from syncd.auth.tokens import Claims, SigningKey, sign_claims
from tests.conftest import SIGNING_KEY_HEX, RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op
from tests.http.test_events import SseReader

END_WITHIN_S = 1.0
"""What docs/permissions.md promises: open connections end within a second."""

REVOKED = {"error": "token_revoked", "message": "token revoked"}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _revoke(client: httpx.AsyncClient, client_id: int, ns: str = "app", **extra: Any) -> Any:
    r = await client.post(
        f"/v1/namespaces/{ns}/revocations",
        json={"client_id": client_id, **extra},
        headers=ADMIN_HEADERS,
    )
    assert r.status_code == 200, r.text
    return r.json()


async def _me(client: httpx.AsyncClient, headers: dict[str, str], ns: str = "app") -> Any:
    return await client.get(f"/v1/namespaces/{ns}/tokens/me", headers=headers)


async def test_a_revoked_client_gets_401_token_revoked_on_every_route(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        old = await issue(client, client_id=7)
        other = await issue(client, client_id=8)
        assert (await op(client, old, "gc:x", {"op": "increment"})).status_code == 200
        before = _now_ms()
        answer = await _revoke(client, 7)
        assert answer["client_id"] == 7
        assert before <= answer["before_ms"] == answer["revoked_at"] <= _now_ms()
        for response in (
            await op(client, old, "gc:x", {"op": "increment"}),
            await client.get("/v1/namespaces/app/crdts/gc:x", headers=old),
            await client.get("/v1/namespaces/app/crdts", headers=old),
            await client.get("/v1/namespaces/app/crdts/gc:x/events", headers=old),
            await _me(client, old),
        ):
            assert response.status_code == 401
            assert response.json() == REVOKED
        # Another client of the namespace, and the root admin, go on.
        assert (await op(client, other, "gc:x", {"op": "increment"})).status_code == 200
        assert (await client.get("/v1/namespaces/app/crdts/gc:x", headers=ADMIN_HEADERS)).json()[
            "value"
        ] == 2
        # A token issued to the same client after the revocation works.
        await asyncio.sleep(0.002)
        fresh = await issue(client, client_id=7)
        assert (await op(client, fresh, "gc:x", {"op": "increment"})).status_code == 200
        assert (await _me(client, fresh)).json()["issued_at"] > answer["before_ms"]


async def test_before_ms_draws_the_line_between_tokens(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await issue(client, client_id=7)
        issued_first = (await _me(client, first)).json()["issued_at"]
        await asyncio.sleep(0.005)
        second = await issue(client, client_id=7)
        issued_second = (await _me(client, second)).json()["issued_at"]
        assert issued_second > issued_first
        # Tokens issued before before_ms are refused; at or after it, not.
        await _revoke(client, 7, before_ms=issued_second)
        assert (await _me(client, first)).json() == REVOKED
        assert (await _me(client, second)).status_code == 200
        # A later revocation replaces the earlier one.
        await _revoke(client, 7, before_ms=issued_second + 1)
        assert (await _me(client, second)).json() == REVOKED
        # before_ms in the future refuses tokens issued until then too.
        await _revoke(client, 7, before_ms=_now_ms() + 3_600_000)
        assert (await _me(client, await issue(client, client_id=7))).json() == REVOKED


async def test_list_and_lift(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        token = await issue(client, client_id=7)
        path = "/v1/namespaces/app/revocations"
        assert (await client.get(path, headers=ADMIN_HEADERS)).json() == {"revocations": []}
        seven = await _revoke(client, 7)
        nine = await _revoke(client, 9, before_ms=123)
        await _revoke(client, 7, ns="elsewhere")
        listed = (await client.get(path, headers=ADMIN_HEADERS)).json()
        assert listed == {"revocations": [seven, nine]}  # by client id, this namespace only
        assert (await _me(client, token)).status_code == 401
        r = await client.delete(f"{path}/7", headers=ADMIN_HEADERS)
        assert r.status_code == 204 and r.content == b""
        assert (await _me(client, token)).status_code == 200  # lifted: the token works again
        assert (await client.get(path, headers=ADMIN_HEADERS)).json() == {"revocations": [nine]}
        r = await client.delete(f"{path}/7", headers=ADMIN_HEADERS)
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        r = await client.get("/v1/namespaces/elsewhere/revocations", headers=ADMIN_HEADERS)
        assert [e["client_id"] for e in r.json()["revocations"]] == [7]


async def test_only_admins_of_the_namespace_may_revoke(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        plain = await issue(client, client_id=7)
        ns_admin = await issue(client, client_id=1, admin=True)
        other_admin = await issue(client, ns="other", client_id=1, admin=True)
        path = "/v1/namespaces/app/revocations"
        for headers, status in ((plain, 403), (other_admin, 403), ({}, 401)):
            assert (await client.get(path, headers=headers)).status_code == status
            r = await client.post(path, json={"client_id": 9}, headers=headers)
            assert r.status_code == status
            assert (await client.delete(f"{path}/9", headers=headers)).status_code == status
        # A V1 admin token of the namespace may.
        r = await client.post(path, json={"client_id": 7}, headers=ns_admin)
        assert r.status_code == 200
        assert (await _me(client, plain)).json() == REVOKED
        assert (await client.get(path, headers=ns_admin)).status_code == 200
        assert (await client.delete(f"{path}/7", headers=ns_admin)).status_code == 204


@pytest.mark.parametrize(
    "body",
    [
        {},
        [],
        {"client_id": "7"},
        {"client_id": -1},
        {"client_id": MAX_CLIENT_ID + 1},
        {"client_id": True},
        {"client_id": 7, "before_ms": -5},
        {"client_id": 7, "before_ms": 1.5},
        {"client_id": 7, "before_ms": 2**63},
        {"client_id": 7, "before": 10},
    ],
)
async def test_bad_bodies_are_400(server: RunningServer, body: Any) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/v1/namespaces/app/revocations", json=body, headers=ADMIN_HEADERS)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == "bad_request"


@pytest.mark.parametrize("segment", ["x", "-1", "07", "1.0", "9" * 30, str(MAX_CLIENT_ID + 1)])
async def test_bad_client_ids_in_the_path_are_400(server: RunningServer, segment: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.delete(f"/v1/namespaces/app/revocations/{segment}", headers=ADMIN_HEADERS)
        assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text


async def test_an_open_event_stream_ends_with_token_revoked(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        writer = await issue(client, client_id=8)
        h = await issue(client, client_id=7)
        path = "/v1/namespaces/app/crdts/gc:s/events"
        sse, status, _ = await SseReader.open(server.port, path, h)
        survivor, _, _ = await SseReader.open(server.port, path, writer)
        assert status == 200 and (await sse.event())["kind"] == "snapshot"
        assert (await survivor.event())["kind"] == "snapshot"
        await op(client, writer, "gc:s", {"op": "increment"})
        assert (await sse.event())["seq"] == 1
        assert (await survivor.event())["seq"] == 1
        started = time.monotonic()
        await _revoke(client, 7)
        assert await sse.end_event(timeout=END_WITHIN_S) == REVOKED
        assert time.monotonic() - started < END_WITHIN_S
        assert await sse.remainder() == b""
        # The other client's stream goes on.
        await op(client, writer, "gc:s", {"op": "increment"})
        assert (await survivor.event())["seq"] == 2
        assert server.app.auth.revocations.live_count() == 1  # client 7's stream is gone
        survivor.close()


def _legacy_token(client_id: int, ns: str = "app") -> str:
    """A token as issued before ``issued_at`` existed: four claims."""
    claims = Claims(ns, client_id, _now_ms() + 3_600_000, V1Permissions(("*",), ("*",)))
    return sign_claims(claims, SigningKey(bytes.fromhex(SIGNING_KEY_HEX)))


async def test_a_token_without_issued_at_counts_as_issued_at_0(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        legacy = {"authorization": f"Bearer {_legacy_token(7)}"}
        me = (await _me(client, legacy)).json()
        assert me["issued_at"] == 0 and me["client_id"] == 7  # old tokens still verify
        await _revoke(client, 7, before_ms=1)
        assert (await _me(client, legacy)).json() == REVOKED


async def test_revocations_survive_a_restart_of_the_embedded_store(
    make_server: Callable[..., Any], tmp_path: Path
) -> None:
    data_dir = tmp_path / "kept"
    first: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=first.url) as client:
        token = await issue(client, client_id=7)
        revocation = await _revoke(client, 7)
        await _revoke(client, 9, ns="b")
    stored = json.loads((data_dir / REVOCATIONS_FILE).read_text())
    assert stored["format"] == 1 and len(stored["revocations"]) == 2
    assert not (data_dir / (REVOCATIONS_FILE + ".tmp")).exists()
    await first.server.shutdown()

    second: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=second.url) as client:
        assert (await _me(client, token)).json() == REVOKED
        r = await client.get("/v1/namespaces/app/revocations", headers=ADMIN_HEADERS)
        assert r.json() == {"revocations": [revocation]}
        assert (
            await client.delete("/v1/namespaces/app/revocations/7", headers=ADMIN_HEADERS)
        ).status_code == 204
    await second.server.shutdown()

    third: RunningServer = await make_server(data_dir=data_dir)
    async with httpx.AsyncClient(base_url=third.url) as client:
        assert (await _me(client, token)).status_code == 200  # the lift was durable too
        r = await client.get("/v1/namespaces/b/revocations", headers=ADMIN_HEADERS)
        assert [e["client_id"] for e in r.json()["revocations"]] == [9]


async def test_a_damaged_revocations_file_stops_the_start(
    make_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Starting without the revocations would let revoked tokens back in."""
    data_dir = tmp_path / "damaged"
    data_dir.mkdir()
    (data_dir / REVOCATIONS_FILE).write_text('{"format": 1, "revocations": [{"namespace": 3}]}')
    with pytest.raises(OSError, match=r"revocations file .* is damaged"):
        await make_server(data_dir=data_dir)
