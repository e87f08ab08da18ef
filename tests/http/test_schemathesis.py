"""schemathesis against the real server: every answer conforms to syncd/openapi.json.

The server is ``python -m syncd`` on a fresh data directory, with the rate
limit raised through its settings so the run does not hit 429. Requests carry
a V1 admin token of one namespace; a generated namespace that is valid is
replaced by that one (an invalid one is kept, so the server's refusals are
exercised too), otherwise nearly every request would stop at 403.

Checks: schemathesis' own (no 5xx, documented status, content type, headers
and body schema, schema-invalid requests refused, auth enforced), except that
"schema-valid requests are accepted" is replaced for the two routes where
validity depends on more than the request: an op may not fit the CRDT's type
or state (then only ``invalid_op`` / ``unknown_type`` may refuse it), and a
token may come out over its 4096-character cap.

Examples per operation: ``SYNCD_SCHEMATHESIS_EXAMPLES`` (default
:data:`DEFAULT_EXAMPLES`, small enough for CI; raise it for a long run).

Left out, and tested by hand in ``test_openapi.py``: the SSE stream (its body
never ends) and the WebSocket upgrade (a 101 hands the socket to another
protocol). Everything else the document describes is generated here.

Generated reads mostly name CRDTs that do not exist, so
:func:`test_reads_of_the_past_and_full_states_conform` adds the reads that
need data: ``?at=`` every seq of a CRDT of each type (0, the state before the
first op, included) and past it, with and without ``format=crdt``, under
every check. Integers written ``1.0`` go to the server as generated, except
inside ops, which refuse them as documented (an op is checked as msgpack
carries it over the WebSocket).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest

if "PYTEST_XDIST_WORKER" in os.environ:
    # Under pytest-xdist schema.parametrize()'s cases are never run and the
    # test passes empty: refuse to pretend (the Makefile runs this file alone).
    pytest.skip("schemathesis cases do not run under pytest-xdist", allow_module_level=True)

schemathesis = pytest.importorskip("schemathesis")

from schemathesis import GenerationMode  # noqa: E402
from schemathesis.core.parameters import ParameterLocation  # noqa: E402
from schemathesis.generation.meta import CoveragePhaseData  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    ignored_auth,
    positive_data_acceptance,
)

from syncd.auth.issue import issue_token  # noqa: E402
from syncd.auth.tokens import SigningKey  # noqa: E402
from tests.conftest import ADMIN, SIGNING_KEY_HEX, free_port, wait_ready  # noqa: E402

DEFAULT_EXAMPLES = 25
"""Hypothesis examples per operation in the fuzzing phase (the coverage phase
adds its boundary cases on top): the whole run stays well under a minute on a
loaded two-core machine."""

EXAMPLES = int(os.environ.get("SYNCD_SCHEMATHESIS_EXAMPLES", DEFAULT_EXAMPLES))
NAMESPACE = "app"
NS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ID_RE = re.compile(r"[A-Za-z0-9._:~@+=-]{1,256}")
UNFUZZED_PATHS = r"/(events|ws|yjs/[^/]+|hocuspocus)$"
SHUTDOWN_TIMEOUT_S = 15
TOKEN_TTL_MS = 31 * 24 * 3600 * 1000
"""Longer than the longest ``ttl_ms`` the server issues (``SERVICE_MAX_TOKEN_TTL_MS``,
30 days by default): a token may not outlive the token that issued it, so an
issuer of one day had every ``ttl_ms`` past its own end refused, which no
schema can say."""


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("schemathesis")
    port = free_port()
    env = {
        **os.environ,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(tmp / "data"),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_FSYNC": "never",
        "SERVICE_RATE_LIMIT": "1000000",
        "SERVICE_LOG_LEVEL": "warning",
    }
    log_path = tmp / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncd"], env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        wait_ready(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log = log_path.read_text(errors="replace")
        # A 500 is logged with its traceback; surface it next to the failure.
        assert "Traceback" not in log, log


DOCUMENT = Path(__file__).resolve().parents[2] / "syncd" / "openapi.json"
# A V1 admin token of NAMESPACE, minted with the key the server is given. It
# is handed to schemathesis as the bearer scheme's credential (not as a header
# of our own), so the cases that leave it out or spoil it stay what they are.
TOKEN_CLIENT_ID = 7
TOKEN = issue_token(
    SigningKey(bytes.fromhex(SIGNING_KEY_HEX)),
    namespace=NAMESPACE,
    client_id=TOKEN_CLIENT_ID,
    ttl_ms=TOKEN_TTL_MS,
    permissions={"read": ["*"], "write": ["*"]},
    admin=True,
    now_ms=time.time_ns() // 1_000_000,
)
CONFIG: dict[str, Any] = {
    "generation": {"max-examples": EXAMPLES},
    # Generation time and size follow the machine's load and the op schemas'
    # size, not a fault: on a busy CI machine these checks would only flake.
    "suppress-health-check": ["too_slow", "data_too_large"],
    "auth": {"openapi": {"bearerAuth": {"bearer": TOKEN}}},
    "operations": [
        {
            # The coverage phase walks every boundary of every op schema: about
            # 1600 requests for the ops route. Its negative half (each limit
            # just crossed) is the part that finds a server laxer than the
            # document; the positive half is kept for long runs.
            "include-path-regex": "/ops$",
            # The server ignores query parameters it does not know (a cache
            # buster, say) rather than refusing them: no case adds one.
            "generation": {"allow-extra-parameters": False},
            "phases": {
                "coverage": {
                    "generation": {"mode": "negative" if EXAMPLES <= DEFAULT_EXAMPLES else "all"}
                }
            },
        }
    ],
}
schema = schemathesis.openapi.from_path(
    DOCUMENT, config=schemathesis.Config.from_dict(CONFIG)
).exclude(path_regex=UNFUZZED_PATHS)
_unique = count()


def _valid_path(case: Any) -> None:
    """Valid namespaces become the token's; invalid ones stay invalid, unless the
    case is about something else (the coverage phase pairs a missing header or
    body with a leftover invalid path, and the server checks the path first)."""
    params = case.path_parameters
    if not params:
        return
    data = case.meta.phase.data if case.meta is not None else None
    about_path = not isinstance(data, CoveragePhaseData) or data.parameter_location in (
        None,
        ParameterLocation.PATH,
    )
    ns = params.get("ns")
    if isinstance(ns, str) and (NS_RE.fullmatch(ns) or not about_path):
        params["ns"] = NAMESPACE
    crdt_id = params.get("id")
    if isinstance(crdt_id, str) and not about_path and not ID_RE.fullmatch(crdt_id):
        params["id"] = "gc:x"


def _pin_body_namespace(case: Any) -> None:
    body = case.body
    if (
        case.path == "/v1/tokens"
        and isinstance(body, dict)
        and isinstance(body.get("namespace"), str)
        and NS_RE.fullmatch(body["namespace"])
    ):
        body["namespace"] = NAMESPACE


def _spare_the_token(case: Any) -> None:
    """A revocation of the run's own client would refuse every later request
    (401 ``token_revoked``): revoke another client instead, as valid as before."""
    body = case.body
    if (
        case.path.endswith("/revocations")
        and isinstance(body, dict)
        and body.get("client_id") == TOKEN_CLIENT_ID
    ):
        body["client_id"] = TOKEN_CLIENT_ID + 1


def _unique_op_ids(case: Any) -> None:
    """Make valid op_ids unique: a repeated op_id is answered from memory without
    validating the op again (docs/data-model.md#op-ids), which would make a deliberately
    invalid op look accepted."""
    body = case.body
    ops = body if isinstance(body, list) else [body]
    for op in ops:
        if isinstance(op, dict):
            op_id = op.get("op_id")
            if isinstance(op_id, str) and 1 <= len(op_id) <= 100:
                op["op_id"] = f"{op_id}~{next(_unique)}"


def _plain_integers(value: Any) -> Any:
    """``1.0`` as ``1`` inside ops: JSON Schema counts it as an integer, ops do
    not (documented: they are checked as msgpack carries them), and the change
    keeps every generated value as valid or invalid as it was. Other bodies
    take ``1.0`` as an integer and get it as generated."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain_integers(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_integers(v) for k, v in value.items()}
    return value


def _no_framing_headers(case: Any) -> None:
    """Drop a generated ``Transfer-Encoding``: it is HTTP framing, which no
    OpenAPI document describes. The server answers a coding it does not know
    with 501 as RFC 9112 asks (docs/http-api.md, tests/http/test_parser_parity.py)."""
    headers = case.headers
    if headers:
        for name in [n for n in headers if str(n).lower() == "transfer-encoding"]:
            del headers[name]


def _is_positive(case: Any) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode == GenerationMode.POSITIVE


STATE_DEPENDENT_CODES = frozenset({"invalid_op", "unknown_type"})
ROOT_PAIRING_MESSAGES = ("root: required with as", "format: not with root")


def _pairs_root_wrongly(case: Any) -> bool:
    """A read with ``as`` but no ``root``, or ``format`` with ``root``: 400 on
    a Yjs document (docs/data-model.md#reading), which parameters alone cannot
    say (OpenAPI has no "requires" between query parameters)."""
    query = case.query or {}
    return case.path == "/v1/namespaces/{ns}/crdts/{id}" and (
        ("as" in query and "root" not in query) or ("format" in query and "root" in query)
    )


@schema.parametrize()
def test_answers_conform_to_the_document(case: Any, live_server: str) -> None:
    _valid_path(case)
    _no_framing_headers(case)
    _pin_body_namespace(case)
    if case.path.endswith("/ops") and case.body is not None:
        case.body = _plain_integers(case.body)
    _spare_the_token(case)
    if case.path.endswith("/ops"):
        _unique_op_ids(case)
    excluded = []
    reverts = case.path.endswith("/revert")
    asks_the_past = case.path.endswith("/restore") or reverts or "at" in (case.query or {})
    pairs_root = _pairs_root_wrongly(case)
    if case.path.endswith("/ops") or case.path.endswith("/tokens") or asks_the_past or pairs_root:
        excluded.append(positive_data_acceptance)
    response = case.call_and_validate(base_url=live_server, excluded_checks=excluded)
    if response.status_code == 400 and _is_positive(case):
        code = response.json()["error"]
        if case.path.endswith("/ops"):
            # Whether an op fits depends on the CRDT's type and state (an id's
            # prefix, element ids, lengths), which no schema can say.
            assert code in STATE_DEPENDENT_CODES, response.text
        elif pairs_root and response.json()["message"].startswith(ROOT_PAIRING_MESSAGES):
            pass  # a Yjs document's root parameters, paired as no schema can say
        elif asks_the_past:
            # A seq past the CRDT's current one: again its state, not the schema
            # (nor can a schema say that a revert's until_seq is not before its since_seq).
            message = response.json()["message"]
            assert "in the future" in message or (reverts and "before since_seq" in message), (
                response.text
            )
        else:
            # Tokens are capped at 4096 characters whatever their lists hold,
            # and one that would grant nothing (no glob, or only empty ones; a
            # rule set with no live rule) is refused: no schema can say either.
            message = response.json()["message"]
            assert message.startswith("permissions too large") or (
                "would grant nothing" in message
            ), response.text


SEEDS: dict[str, list[dict[str, Any]]] = {
    "gc:past": [{"op": "increment", "amount": 2}, {"op": "increment"}],
    "pn:past": [{"op": "increment", "amount": 5}, {"op": "decrement", "amount": 2}],
    "or:past": [{"op": "add", "element": {"sku": "A"}}, {"op": "remove", "element": {"sku": "A"}}],
    "lw:past": [{"op": "set", "value": "a"}, {"op": "set", "value": [1, 2]}],
    "pr:past": [{"op": "update", "data": {"x": 1}}, {"op": "leave"}],
    "rg:past": [{"op": "insert", "index": 0, "text": "hey"}, {"op": "delete", "index": 1}],
    "tr:past": [
        {"op": "add", "id": "a", "parent": "root", "data": {"t": 1}},
        {"op": "move", "id": "a", "parent": "root", "pos": "m"},
    ],
}


def _yjs_updates() -> list[dict[str, Any]]:
    import base64

    from pycrdt import Doc, Text

    doc: Doc = Doc()
    text = doc.get("content", type=Text)
    updates = []
    for piece in ("hello", " world"):
        state = doc.get_state()
        text.insert(len(str(text)), piece)
        updates.append(base64.b64encode(doc.get_update(state)).decode())
    return [{"op": "update", "update": u} for u in updates]


def test_reads_of_the_past_and_full_states_conform(live_server: str) -> None:
    """Every ``?at=`` of a CRDT of each type, with and without ``format=crdt``,
    and Yjs roots at a seq: under every check, the answer is one the document
    allows (the state at seq 0 included); a seq past the current one is its
    documented 400. Integers written ``1.0`` in bodies are accepted."""
    import httpx

    headers = {"authorization": f"Bearer {TOKEN}"}
    seeds = {**SEEDS, "yd:past": _yjs_updates()}
    with httpx.Client(base_url=live_server, headers=headers) as client:
        for crdt_id, ops in seeds.items():
            for body in ops:
                r = client.post(f"/v1/namespaces/{NAMESPACE}/crdts/{crdt_id}/ops", json=body)
                assert r.status_code == 200, (crdt_id, r.text)
    read = schema["/v1/namespaces/{ns}/crdts/{id}"]["GET"]
    checked = 0
    for crdt_id, ops in seeds.items():
        path = {"ns": NAMESPACE, "id": crdt_id}
        for at in range(len(ops) + 2):
            for extra in ({}, {"format": "crdt"}):
                query = {"at": at, **extra}
                case = read.Case(path_parameters=path, query=query)
                future = at > len(ops)
                response = case.call_and_validate(
                    base_url=live_server,
                    headers=headers,
                    excluded_checks=[ignored_auth, positive_data_acceptance]
                    if future
                    else [ignored_auth],
                )
                if future:
                    assert response.status_code == 400, response.text
                    assert "in the future" in response.json()["message"]
                else:
                    assert response.status_code == 200, response.text
                    assert response.json()["seq"] == at
                checked += 1
        case = read.Case(path_parameters=path, query={"format": "crdt"})
        response = case.call_and_validate(
            base_url=live_server, headers=headers, excluded_checks=[ignored_auth]
        )
        assert response.status_code == 200
    for at in range(3):
        query = {"root": "content", "as": "text", "at": at}
        case = read.Case(path_parameters={"ns": NAMESPACE, "id": "yd:past"}, query=query)
        response = case.call_and_validate(
            base_url=live_server, headers=headers, excluded_checks=[ignored_auth]
        )
        assert response.json()["value"] == ["", "hello", "hello world"][at]
    assert checked == sum(2 * (len(ops) + 2) for ops in seeds.values())

    # Integers written as JSON Schema allows them: 1.0 is an integer.
    restore = schema["/v1/namespaces/{ns}/crdts/{id}/restore"]["POST"]
    case = restore.Case(
        path_parameters={"ns": NAMESPACE, "id": "lw:past"},
        body={"seq": 1.0},
        media_type="application/json",
    )
    response = case.call_and_validate(
        base_url=live_server, headers=headers, excluded_checks=[ignored_auth]
    )
    assert response.status_code == 200 and response.json()["restored"] == 1
    tokens = schema["/v1/namespaces/{ns}/tokens"]["POST"]
    case = tokens.Case(
        path_parameters={"ns": NAMESPACE},
        body={"client_id": 9.0, "ttl_ms": 60000.0, "permissions": {"read": ["*"]}},
        media_type="application/json",
    )
    response = case.call_and_validate(
        base_url=live_server, headers=headers, excluded_checks=[ignored_auth]
    )
    assert response.status_code == 200
