"""syncd/openapi.json: a valid OpenAPI 3.1 document that cannot drift from the server.

- every route the router knows is documented, and every documented route exists;
- every error code the code can raise is in the document, under its status;
- every example in the document conforms to its schema;
- the served document is the file, byte for byte, without authentication;
- real answers (each type's view and full state, op answers, listings, token
  claims, errors, SSE deltas, WebSocket messages) conform to their schemas,
  including the two routes schemathesis cannot drive (SSE and the upgrade).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from syncd import __version__
from syncd.app import App
from syncd.config import Settings
from syncd.http.handlers.openapi import OPENAPI_PATH, load_document
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS, issue, op
from tests.http.test_events import SseReader
from tests.ws.support import open_ws, recv, send_json

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT_PATH = ROOT / "syncd" / "openapi.json"
DOC: dict[str, Any] = json.loads(DOCUMENT_PATH.read_text(encoding="utf-8"))
DOC_URI = "urn:syncd:openapi"
REGISTRY: Registry[Any] = Registry().with_resource(
    DOC_URI, Resource.from_contents(DOC, default_specification=DRAFT202012)
)
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def schema_ref(name: str) -> dict[str, Any]:
    return {"$ref": f"{DOC_URI}#/components/schemas/{name}"}


def check(instance: Any, schema: dict[str, Any]) -> None:
    """Validate against a schema of the document (its $refs resolve in it)."""
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(instance)


def conforms(instance: Any, name: str) -> None:
    check(instance, schema_ref(name))


def documented_operations() -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in DOC["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in DOC["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                yield method, path, item[method]


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (responses, parameters)."""
    while "$ref" in node:
        target: Any = DOC
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def responses_of(path: str, method: str) -> dict[str, dict[str, Any]]:
    raw = DOC["paths"][path][method]["responses"]
    return {status: resolve(answer) for status, answer in raw.items()}


def answer_schema(path: str, method: str, status: int) -> dict[str, Any]:
    answer = responses_of(path, method)[str(status)]
    schema = answer["content"]["application/json"]["schema"]
    return _absolute(schema)


def _absolute(schema: Any) -> Any:
    """A schema taken out of the document, with its local $refs made absolute."""
    if isinstance(schema, dict):
        return {
            k: (f"{DOC_URI}{v}" if k == "$ref" and v.startswith("#") else _absolute(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_absolute(v) for v in schema]
    return schema


def answer_conforms(response: httpx.Response, path: str, method: str) -> None:
    """The answer's status is documented for the operation and its body fits."""
    documented = responses_of(path, method)
    assert str(response.status_code) in documented, (path, method, response.status_code)
    content = documented[str(response.status_code)].get("content", {})
    if "application/json" in content:
        assert response.headers["content-type"] == "application/json"
        check(response.json(), answer_schema(path, method, response.status_code))
    else:
        assert not response.content or "text/plain" in content


# --- the document itself ------------------------------------------------------


def test_document_is_openapi_3_1_with_valid_schemas() -> None:
    assert DOC["openapi"].startswith("3.1.")
    assert DOC["info"]["version"] == __version__
    assert DOC["components"]["securitySchemes"]["bearerAuth"] == {
        **DOC["components"]["securitySchemes"]["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
    }
    for name, schema in DOC["components"]["schemas"].items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"components.schemas.{name}: {exc.message}")
    ids = [operation["operationId"] for _, _, operation in operations()]
    assert len(ids) == len(set(ids))
    for method, path, operation in operations():
        assert any(s.startswith("2") or s == "101" for s in operation["responses"]), (method, path)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_reference_resolves() -> None:
    for ref in set(_refs(DOC)):
        assert ref.startswith("#/"), ref
        resolve({"$ref": ref})  # raises KeyError when dangling


def test_authentication_is_documented_where_the_server_asks_for_it() -> None:
    # Hocuspocus authenticates each document in band, after the upgrade.
    open_routes = {
        "/health/live",
        "/health/ready",
        "/metrics",
        OPENAPI_PATH,
        "/v1/namespaces/{ns}/hocuspocus",
    }
    for method, path, operation in operations():
        if path in open_routes:
            assert operation.get("security") == [], path
            assert "401" not in operation["responses"], path
        else:
            assert operation.get("security", DOC["security"]) != [], path
            assert {"401", "403", "429"} <= set(operation["responses"]), (method, path)


# --- drift: routes and error codes --------------------------------------------

NOT_API = "OPTIONS preflights (CORS) and the demo page are not part of the API"


def router_routes() -> set[tuple[str, str]]:
    # Everything optional switched on, so every route registers.
    settings = Settings(
        data_dir=Path("/nonexistent/syncd-openapi-test"), demo=True, cors_origins=("*",)
    )
    app = App(settings)
    return set(app.router.routes)


def _is_api(route: tuple[str, str]) -> bool:
    method, pattern = route
    return method != "OPTIONS" and not (pattern == "/demo" or pattern.startswith("/demo/"))


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    routes = router_routes()
    api = {route for route in routes if _is_api(route)}
    assert routes - api, "the exclusions should match something; drop them if not"
    assert documented_operations() - api == set(), "documented but not routed"
    assert api - documented_operations() == set(), "routed but not documented"


def test_route_exclusions_are_only_preflights_and_the_demo() -> None:
    for method, pattern in router_routes():
        if not _is_api((method, pattern)):
            assert method == "OPTIONS" or pattern.startswith("/demo"), NOT_API


_RAISED = re.compile(r"(?:ApiError|error_response)\(\s*(\d{3}),\s*\"([a-z_]+)\"")
_HELPERS = re.compile(r"def (\w+)\([^)]*\) -> ApiError:\s+return ApiError\((\d{3}), \"([a-z_]+)\"")


def raised_codes() -> set[tuple[int, str]]:
    """Every (status, code) the source can answer with, found in the source."""
    found: set[tuple[int, str]] = set()
    for path in (ROOT / "syncd").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found.update((int(s), c) for s, c in _RAISED.findall(text))
        found.update((int(s), c) for _, s, c in _HELPERS.findall(text))
    return found


def documented_codes() -> set[tuple[int, str]]:
    schemas = DOC["components"]["schemas"]
    return {
        (int(name[5:]), code)
        for name, schema in schemas.items()
        if re.fullmatch(r"Error\d{3}", name)
        for code in schema["properties"]["error"]["enum"]
    }


def test_every_error_code_in_the_source_is_documented() -> None:
    raised = raised_codes()
    assert (429, "rate_limited") in raised and (400, "invalid_op") in raised  # the scan works
    assert raised - documented_codes() == set()


EXTRA_ERROR_FIELDS = {410: ["oldest"], 429: ["retry_after"]}
"""Errors that say more than error and message (history_expired: the oldest seq;
rate_limited: the seconds to wait)."""


def test_error_bodies_are_exactly_error_and_message() -> None:
    every = set(DOC["components"]["schemas"]["Error"]["properties"]["error"]["enum"])
    assert every == {code for _, code in documented_codes()}
    for status, _ in documented_codes():
        body = DOC["components"]["schemas"][f"Error{status}"]
        assert body["required"] == ["error", "message", *EXTRA_ERROR_FIELDS.get(status, [])]
        assert body["additionalProperties"] is False
    for method, path, operation in operations():
        for status, answer in operation["responses"].items():
            if status.startswith(("4", "5")) and "$ref" in answer:
                schema = resolve(answer)["content"]["application/json"]["schema"]
                assert schema == {"$ref": f"#/components/schemas/Error{status}"}, (method, path)


# --- examples -----------------------------------------------------------------


def _examples() -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(where, example, schema) for every example in the document."""
    for name, schema in DOC["components"]["schemas"].items():
        for i, example in enumerate(schema.get("examples", [])):
            yield f"schemas.{name}[{i}]", example, schema_ref(name)
    for name, parameter in DOC["components"]["parameters"].items():
        if "example" in parameter:
            yield f"parameters.{name}", parameter["example"], _absolute(parameter["schema"])

    def media(where: str, content: dict[str, Any]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
        for media_type, body in content.items():
            if media_type != "application/json":
                continue
            schema = _absolute(body["schema"])
            for key, example in body.get("examples", {}).items():
                yield f"{where} {key}", example["value"], schema
            if "example" in body:
                yield where, body["example"], schema

    for name, answer in DOC["components"]["responses"].items():
        yield from media(f"responses.{name}", answer.get("content", {}))
    for method, path, operation in operations():
        where = f"{method.upper()} {path}"
        request = operation.get("requestBody")
        if request is not None:
            yield from media(f"{where} request", request["content"])
        for status, answer in operation["responses"].items():
            if "$ref" not in answer:
                yield from media(f"{where} {status}", answer.get("content", {}))
        for parameter in operation.get("parameters", []):
            parameter = resolve(parameter)
            for key, example in parameter.get("examples", {}).items():
                yield f"{where} ?{parameter['name']} {key}", example["value"], parameter["schema"]
            if "example" in parameter:
                yield f"{where} {parameter['name']}", parameter["example"], parameter["schema"]


def test_every_example_conforms_to_its_schema() -> None:
    seen = 0
    for where, example, schema in _examples():
        seen += 1
        try:
            check(example, schema)
        except jsonschema.ValidationError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{where}: {exc.message}")
    assert seen > 40


def test_schemas_refuse_what_the_engine_refuses() -> None:
    """Spot checks of the op schemas at their limits (schemathesis walks them all)."""
    good = [
        {"op": "increment", "amount": 2**53 - 1},
        {"op": "add", "element": None},
        {"op": "set", "value": 1, "timestamp": None},
        {"op": "update", "ttl_ms": 1000},
        {"op": "insert", "after": None, "values": [1]},
        {"op": "delete", "ids": ["1@-3"]},
        {"op": "move", "id": "a", "parent": "b", "pos": None},
        [{"op": "leave"}] * 1000,
    ]
    bad = [
        {"op": "increment", "amount": 0},
        {"op": "increment", "amount": 2**53},
        {"op": "increment", "amount": True},
        {"op": "add"},
        {"op": "update", "ttl_ms": 999},
        {"op": "update", "ttl_ms": None},
        {"op": "insert", "index": 0, "after": None, "text": "a"},
        {"op": "insert", "index": 0, "text": ""},
        {"op": "delete", "ids": ["01@3"]},
        {"op": "delete", "ids": ["1@3"], "count": 1},
        {"op": "move", "id": "a"},
        {"op": "update", "id": "a", "data": []},
        {"op": "increment", "type": "orset"},
        {"op": "increment", "op_id": ""},
        {"op": "increment", "op_id": "x" * 129},
        [],
        [{"op": "leave"}] * 1001,
        "increment",
    ]
    for body in good:
        conforms(body, "OpsRequest")
    for body in bad:
        with pytest.raises(jsonschema.ValidationError):
            conforms(body, "OpsRequest")


# --- the served document ------------------------------------------------------


async def test_served_document_is_the_file_without_authentication(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get(OPENAPI_PATH)
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert r.content == DOCUMENT_PATH.read_bytes() == load_document()
        head = await client.head(OPENAPI_PATH)
        assert head.status_code == 200 and head.content == b""
        refused = await client.post(OPENAPI_PATH, json={})
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
        conforms(refused.json(), "Error405")


# --- real answers -------------------------------------------------------------

OPS_PATH = "/v1/namespaces/{ns}/crdts/{id}/ops"
READ_PATH = "/v1/namespaces/{ns}/crdts/{id}"
SCENARIOS: dict[str, list[Any]] = {
    "gc:a": [{"op": "increment", "amount": 3}],
    "pn:a": [{"op": "increment", "amount": 5}, {"op": "decrement", "amount": 7}],
    "or:a": [{"op": "add", "element": {"b": [1, 2.5]}}, {"op": "add", "element": None}],
    "lw:a": [{"op": "set", "value": {"x": 1}}],
    "pr:a": [{"op": "update", "data": {"cursor": 3}}, {"op": "leave"}],
    "rg:a": [{"op": "insert", "index": 0, "text": "hey"}, {"op": "delete", "index": 1}],
    "rg:b": [{"op": "insert", "after": None, "values": [1, "x", None]}],
    "tr:a": [
        {"op": "add", "id": "a", "data": {"t": 1}},
        {"op": "add", "id": "b", "pos": "0"},
        {"op": "move", "id": "b", "parent": "a"},
        {"op": "update", "id": "a", "data": {"t": 2}},
    ],
    "untyped": [{"op": "update", "type": "presence", "data": {"here": True}}],
}


async def test_every_type_answers_as_documented(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for crdt_id, ops in SCENARIOS.items():
            r = await op(client, h, crdt_id, ops, query="?return=state")
            assert r.status_code == 200, r.text
            answer_conforms(r, OPS_PATH, "post")
            for query, name in (("", "CrdtView"), ("?format=crdt", "CrdtFull")):
                read = await client.get(f"/v1/namespaces/app/crdts/{crdt_id}{query}", headers=h)
                answer_conforms(read, READ_PATH, "get")
                conforms(read.json(), name)
        # One op alone, an rga insert's ids, an op_id repeat.
        r = await op(client, h, "rg:a", {"op": "insert", "index": 0, "text": "a", "op_id": "k"})
        answer_conforms(r, OPS_PATH, "post")
        again = await op(client, h, "rg:a", {"op": "insert", "index": 0, "text": "a", "op_id": "k"})
        assert again.json()["duplicate"] is True
        answer_conforms(again, OPS_PATH, "post")
        listing = await client.get("/v1/namespaces/app/crdts?limit=2", headers=h)
        answer_conforms(listing, "/v1/namespaces/{ns}/crdts", "get")
        assert listing.json()["next"] is not None


async def test_errors_answer_as_documented(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, write=["gc:*"], admin=False)
        cases: list[tuple[str, str, dict[str, Any], Any, int]] = [
            ("get", "/v1/namespaces/app/crdts/gc:none", h, None, 404),
            ("get", "/v1/namespaces/app/crdts/gc:none", {}, None, 401),
            ("get", "/v1/namespaces/app/crdts/gc:none", {"authorization": "Bearer x.y"}, None, 401),
            ("get", "/v1/namespaces/other/crdts/gc:none", h, None, 403),
            ("get", "/v1/namespaces/-x/crdts/gc:none", h, None, 400),
            ("get", "/v1/namespaces/app/crdts/a%2Fb", h, None, 400),
            ("delete", "/v1/namespaces/app/crdts/gc:none", h, None, 403),
            ("delete", "/v1/namespaces/app/crdts/gc:none", ADMIN_HEADERS, None, 404),
            ("post", "/v1/namespaces/app/crdts/or:x/ops", h, {"op": "add", "element": 1}, 403),
            ("post", "/v1/namespaces/app/crdts/gc:x/ops", h, {"op": "add"}, 400),
            # An admin: a token that may not write x is 403 before its op's type.
            ("post", "/v1/namespaces/app/crdts/x/ops", ADMIN_HEADERS, {"op": "increment"}, 400),
            ("post", "/v1/namespaces/app/crdts/gc:x/ops", h, {"op": "add", "type": "orset"}, 409),
            ("post", "/v1/namespaces/app/crdts/gc:x/ops", h, [], 400),
            ("post", "/v1/namespaces/app/tokens", h, {"client_id": 1}, 403),
            ("post", "/v1/namespaces/app/tokens", ADMIN_HEADERS, {"client_id": 1}, 400),
            ("get", "/v1/namespaces/app/crdts?limit=0", h, None, 400),
        ]
        templates = {
            "/v1/namespaces/app/crdts": "/v1/namespaces/{ns}/crdts",
            "/v1/namespaces/app/tokens": "/v1/namespaces/{ns}/tokens",
        }
        for method, url, headers, body, status in cases:
            r = await client.request(method, url, headers=headers, json=body)
            assert r.status_code == status, (url, r.text)
            path = url.split("?")[0]
            template = templates.get(path) or re.sub(
                r"^/v1/namespaces/[^/]+/crdts/[^/]+", READ_PATH, path
            )
            answer_conforms(r, template, method)
        raw = await client.post(
            "/v1/namespaces/app/crdts/gc:x/ops",
            headers={**h, "content-type": "text/plain"},
            content=b"{}",
        )
        assert raw.status_code == 415
        answer_conforms(raw, OPS_PATH, "post")


async def test_token_routes_answer_as_documented(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        me = "/v1/namespaces/{ns}/tokens/me"
        v1 = await issue(client, admin=True)
        v2 = await issue(
            client, rules={"r": [{"p": "*", "e": 2**40}], "w": [{"p": "x", "o": 3}], "rl": 5}
        )
        for headers in (v1, v2, ADMIN_HEADERS):
            r = await client.get("/v1/namespaces/app/tokens/me", headers=headers)
            answer_conforms(r, me, "get")
        body = {"namespace": "app", "client_id": 3, "permissions": {"read": ["*"]}}
        r = await client.post("/v1/tokens", headers=v1, json=body)
        answer_conforms(r, "/v1/tokens", "post")
        for client_body in (
            {"client_id": 3, "permissions": {"read": ["gc:*"]}},
            {"client_id": 3, "rules": {"v": 2, "r": [{"p": "{clientId}:*"}], "w": []}},
        ):
            r = await client.post("/v1/namespaces/app/tokens", headers=v1, json=client_body)
            answer_conforms(r, "/v1/namespaces/{ns}/tokens", "post")
            conforms(client_body, "IssueTokenRequest")


async def test_health_and_metrics_answer_as_documented(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        for path in ("/health/live", "/health/ready", "/metrics"):
            r = await client.get(path)
            answer_conforms(r, path, "get")


# --- the routes schemathesis cannot drive ---------------------------------------


async def test_event_stream_deltas_conform(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client)
        for crdt_id, ops in SCENARIOS.items():
            path = f"/v1/namespaces/app/crdts/{crdt_id}/events"
            stream, status, headers = await SseReader.open(
                server.port, path.replace(crdt_id, "new-" + crdt_id), h
            )
            try:
                assert status == 200 and headers["content-type"] == "text/event-stream"
                first = await stream.event()
                conforms(first, "SnapshotDelta")
                assert first["seq"] == 0 and first["state"] is None
            finally:
                stream.close()
            stream, status, _ = await SseReader.open(server.port, path, h)
            try:
                conforms(await stream.event(), "Delta")  # snapshot (or the empty one)
                for one in ops:
                    assert (await op(client, h, crdt_id, one)).status_code == 200
                    delta = await stream.event()
                    conforms(delta, "OpDelta")
                    conforms(delta["op"], "DeltaOp")
                if crdt_id == "gc:a":
                    r = await client.delete(
                        f"/v1/namespaces/app/crdts/{crdt_id}", headers=ADMIN_HEADERS
                    )
                    assert r.status_code == 204
                    conforms(await stream.event(), "DeletedDelta")
            finally:
                stream.close()
        refused, status, _ = await SseReader.open(
            server.port, "/v1/namespaces/app/crdts/x/events", {}
        )
        try:
            assert status == 401
        finally:
            refused.close()
        # The document lets the token come as ?token= here (queryToken).
        events = DOC["paths"]["/v1/namespaces/{ns}/crdts/{id}/events"]["get"]
        assert {"queryToken": []} in events["security"]
        token = h["authorization"].removeprefix("Bearer ")
        in_query, status, _ = await SseReader.open(
            server.port, f"/v1/namespaces/app/crdts/x/events?token={token}", {}
        )
        try:
            assert status == 200
            conforms(await in_query.event(), "SnapshotDelta")
        finally:
            in_query.close()


async def test_websocket_messages_conform(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        h = await issue(client, ns="demo")
        token = h["authorization"].removeprefix("Bearer ")
        refused = await client.get(
            "/v1/namespaces/demo/ws",
            headers={
                "upgrade": "websocket",
                "connection": "Upgrade",
                "sec-websocket-version": "13",
                "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
        answer_conforms(refused, "/v1/namespaces/{ns}/ws", "get")
        assert refused.status_code == 401
    async with open_ws(server, token) as ws:
        client_messages: list[dict[str, Any]] = [
            {"kind": "subscribe", "id": "rg:w"},
            {
                "kind": "op",
                "id": "rg:w",
                "op": {"op": "insert", "index": 0, "text": "ab"},
                "ref": 1,
            },
            {"kind": "op", "id": "rg:w", "op": {"op": "delete", "index": 9}, "ref": "two"},
            {"kind": "ping", "ref": 3},
        ]
        for message in client_messages:
            conforms(message, "WsClientMessage")
            await send_json(ws, message)
        kinds = set()
        for _ in range(6):  # snapshot, synced, op delta, ack, error, pong (in some order)
            message = await recv(ws, synced=True)
            conforms(message, "WsServerMessage")
            kinds.add(message["kind"])
        assert kinds == {"snapshot", "synced", "op", "ack", "error", "pong"}
        unsubscribe = {"kind": "unsubscribe", "id": "rg:w"}
        conforms(unsubscribe, "WsClientMessage")
        await send_json(ws, unsubscribe)
