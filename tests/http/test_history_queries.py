"""The query parameters and bodies of the read, ``?at=``, ``/history`` and
restore routes, over real sockets: a parameter the route knows is used or
refused with a 400 naming it, never silently ignored (docs/http-api.md)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import pytest
from pycrdt import Doc, Text

from syncd.history.reads import MAX_HISTORY_LIMIT
from syncd.http.handlers.crdts import MAX_ROOT_NAME
from syncd.http.handlers.history import MAX_OP_ID
from tests.conftest import RunningServer
from tests.http.support import issue, op

BASE = "/v1/namespaces/app/crdts"


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url) as c:
        yield c


@pytest.fixture
async def h(client: httpx.AsyncClient) -> dict[str, str]:
    """A token, and pn:c at seq 3 (+1 three times)."""
    headers = await issue(client)
    for _ in range(3):
        assert (await op(client, headers, "pn:c", {"op": "increment"})).status_code == 200
    return headers


async def _bad(client: httpx.AsyncClient, h: dict[str, str], url: str) -> str:
    """The message of a 400 ``bad_request`` (asserted) to GET ``url``."""
    r = await client.get(url, headers=h)
    assert r.status_code == 400, (url, r.text)
    assert r.json()["error"] == "bad_request", r.text
    message: str = r.json()["message"]
    return message


async def test_restore_refuses_unknown_fields_as_revert_does(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    for body in ({"seq": 1, "sequence": 2}, {"seq": 1, "op_id": "a", "opid": "b"}):
        r = await client.post(f"{BASE}/pn:c/restore", json=body, headers=h)
        assert (r.status_code, r.json()["error"]) == (400, "bad_request"), r.text
        unknown = next(key for key in body if key not in ("seq", "op_id"))
        assert r.json()["message"].startswith(f"{unknown}: unknown field"), r.text
        assert "seq, op_id" in r.json()["message"]
    # Nothing was restored.
    assert (await client.get(f"{BASE}/pn:c", headers=h)).json()["value"] == 3
    # The revert says it the same way.
    r = await client.post(f"{BASE}/pn:c/revert", json={"client_id": 7, "x": 1}, headers=h)
    assert r.status_code == 400 and r.json()["message"].startswith("x: unknown field")


async def test_an_unknown_format_is_400_with_and_without_at(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    for value in ("bogus", "", "CRDT", "json"):
        plain = await _bad(client, h, f"{BASE}/pn:c?format={value}")
        past = await _bad(client, h, f"{BASE}/pn:c?at=1&format={value}")
        assert plain == past and plain.startswith("format:") and "crdt" in plain, value
    # The one format there is still answers, now and in the past.
    now = (await client.get(f"{BASE}/pn:c?format=crdt", headers=h)).json()
    then = (await client.get(f"{BASE}/pn:c?format=crdt&at=1", headers=h)).json()
    assert now["seq"] == 3 and "state" in now and then["seq"] == 1 and "state" in then


async def _ydoc(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    doc: Doc = Doc()
    doc.get("content", type=Text).insert(0, "hello")
    update = base64.b64encode(doc.get_update()).decode()
    assert (await op(client, h, "yd:d", {"op": "update", "update": update})).status_code == 200


async def test_as_without_root_on_a_ydoc_is_400_naming_root(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    await _ydoc(client, h)
    for query in ("as=text", "as=map", "as=text&at=1", "as=bogus"):
        message = await _bad(client, h, f"{BASE}/yd:d?{query}")
        assert message.startswith("root:") and "as" in message, (query, message)
    # With its root it reads as documented.
    r = await client.get(f"{BASE}/yd:d?root=content&as=text", headers=h)
    assert r.status_code == 200 and r.json()["value"] == "hello"


async def test_as_on_another_type_is_409_as_root_is(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    for query in ("as=text", "root=content"):
        r = await client.get(f"{BASE}/pn:c?{query}", headers=h)
        assert (r.status_code, r.json()["error"]) == (409, "type_mismatch"), (query, r.text)


async def test_format_with_a_root_view_is_400(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    await _ydoc(client, h)
    for value in ("crdt", "bogus"):
        message = await _bad(client, h, f"{BASE}/yd:d?root=content&format={value}")
        assert message.startswith("format:") and "root" in message, (value, message)


async def test_a_bad_history_limit_names_limit_and_its_range(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    for value in ("x", "-1", "0", "", "1.5", "%C2%B2", str(MAX_HISTORY_LIMIT + 1), "9" * 30):
        message = await _bad(client, h, f"{BASE}/pn:c/history?limit={value}")
        expected = f"limit: an integer from 1 to {MAX_HISTORY_LIMIT} is required"
        assert message == expected, (value, message)


async def test_history_limits_at_their_bounds(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    for limit, ops in ((1, 1), (MAX_HISTORY_LIMIT, 3)):
        r = await client.get(f"{BASE}/pn:c/history?limit={limit}", headers=h)
        assert r.status_code == 200 and len(r.json()["ops"]) == ops, r.text


async def test_a_bad_seq_names_its_range(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    for url, name in (
        ("pn:c?at=99999999999999999999", "at"),
        ("pn:c/history?before=99999999999999999999", "before"),
        ("pn:c?at=1e3", "at"),
        ("pn:c/history?before=-2", "before"),
    ):
        message = await _bad(client, h, f"{BASE}/{url}")
        expected = f"{name}: an integer seq from 0 to 999999999999999999 is required"
        assert message == expected, (url, message)


async def test_the_largest_seq_is_in_the_future_not_malformed(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    message = await _bad(client, h, f"{BASE}/pn:c?at=999999999999999999")
    assert "in the future" in message
    r = await client.get(f"{BASE}/pn:c/history?before=999999999999999999", headers=h)
    assert r.status_code == 200 and len(r.json()["ops"]) == 3


async def test_a_known_parameter_given_twice_is_400(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    await _ydoc(client, h)
    for url, name in (
        ("pn:c?at=1&at=2", "at"),
        ("pn:c?format=crdt&format=crdt", "format"),
        ("pn:c?at=1&x=1&at=1", "at"),
        ("yd:d?root=a&root=b", "root"),
        ("yd:d?root=a&as=text&as=map", "as"),
        ("pn:c/history?limit=1&limit=2", "limit"),
        ("pn:c/history?before=2&before=3", "before"),
        ("pn:c/history?client_id=7&client_id=8", "client_id"),
        ("pn:c/history?origin=a&origin=b", "origin"),
    ):
        message = await _bad(client, h, f"{BASE}/{url}")
        assert message.startswith(f"{name}: given more than once"), (url, message)


async def test_history_refuses_the_paging_parameters_of_other_routes(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    for name in ("since", "at", "cursor"):
        message = await _bad(client, h, f"{BASE}/pn:c/history?{name}=2")
        assert message.startswith(f"{name}:") and "before" in message, (name, message)


async def test_parameters_no_route_knows_are_still_ignored(
    client: httpx.AsyncClient, h: dict[str, str]
) -> None:
    # A cache buster, even repeated, changes nothing (docs/http-api.md#conventions).
    for url in ("pn:c?_=1&_=2", "pn:c?at=2&_=1", "pn:c/history?limit=1&_=1&_=2"):
        r = await client.get(f"{BASE}/{url}", headers=h)
        assert r.status_code == 200, (url, r.text)


async def test_root_names_at_their_limit(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    await _ydoc(client, h)
    longest = "r" * MAX_ROOT_NAME
    r = await client.get(f"{BASE}/yd:d?root={longest}&as=map", headers=h)
    assert r.status_code == 200 and r.json()["root"] == longest and r.json()["value"] == {}
    message = await _bad(client, h, f"{BASE}/yd:d?root={longest}r")
    assert message == f"root: 1 to {MAX_ROOT_NAME} characters"


async def test_restore_op_ids_at_their_limit(client: httpx.AsyncClient, h: dict[str, str]) -> None:
    # MAX_OP_ID leaves room for the "/<i>" each of the restore's ops carries.
    longest = "k" * MAX_OP_ID
    r = await client.post(f"{BASE}/pn:c/restore", json={"seq": 1, "op_id": longest}, headers=h)
    assert r.status_code == 200 and r.json()["applied"] == 1, r.text
    ops = (await client.get(f"{BASE}/pn:c/history?limit=1", headers=h)).json()["ops"]
    assert ops[0]["op_id"] == f"{longest}/0"
    r = await client.post(
        f"{BASE}/pn:c/restore", json={"seq": 1, "op_id": longest + "k"}, headers=h
    )
    assert r.status_code == 400 and r.json()["message"].startswith("op_id:"), r.text
