"""Nothing outside the data directory can be touched through a namespace or id.

Path-traversal shapes go in as namespaces and ids over HTTP (every route that
takes them, and the list's prefix and cursor) and over WebSocket (the
upgrade's namespace, subscribe and op ids). Invalid ones are refused with
their 400; valid ones that look like paths (``..``, ``LOCK``, ``log``) are
plain keys. Afterwards the data directory holds only the store's own layout,
a file beside it is untouched, no file named after a payload exists anywhere
we can see, and after a restart the path-like ids read back from the log.
The store modules are also checked statically: no path they build mentions
a namespace or id.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

import syncd.store
from tests.conftest import ADMIN, Subprocess
from tests.fuzz.support import (
    check_ws_transcript,
    client_frame,
    http_exchange,
    parse_responses,
    parse_server_frames,
    ws_case,
)

MARKER = "zz-trav-marker"
"""In every payload, so a file created from one would be found by name."""
BAD_SEGMENTS = [
    "..%2F..%2F" + MARKER,
    "..%2f..%2f..%2f..%2ftmp%2f" + MARKER,
    "%2F..%2F" + MARKER,
    "..%5C..%5C" + MARKER,
    "%2e%2e%2f" + MARKER,
    "%00" + MARKER,
    MARKER + "%00",
    "%c0%ae%c0%ae%2f" + MARKER,
    "..%252F" + MARKER,
    "a%2F..%2F..%2F" + MARKER,
    "%2Ftmp%2F" + MARKER,
    "~%2F" + MARKER,
]
PATHLIKE_NAMESPACES = [MARKER, "a..b", "LOCK", "log", "snapshots", "x.."]
PATHLIKE_IDS = [
    "..",
    ".",
    "...",
    "..:..",
    "~",
    "LOCK",
    "log",
    "snapshots",
    MARKER,
    "gc:..",
    "=..@..",
]
LAYOUT = re.compile(
    r"^(LOCK|log|snapshots|history|log/\d{20}\.seg|snapshots/snapshot-\d{20}\.snap"
    r"|history/\d{20}\.hist|history/index\.hint)$"
)


def request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ADMIN}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def status_and_body(
    port: int, method: str, path: str, body: bytes = b""
) -> tuple[int, dict[str, Any]]:
    (response,) = parse_responses(http_exchange(port, request(method, path, body)), [method])
    return response.status, json.loads(response.body) if response.body else {}


INCREMENT = json.dumps({"op": "increment", "type": "gcounter"}).encode()


def attack(port: int) -> None:
    for bad in BAD_SEGMENTS:
        for method, path, body in [
            ("POST", f"/v1/namespaces/{bad}/crdts/gc:x/ops", INCREMENT),
            ("POST", f"/v1/namespaces/app/crdts/{bad}/ops", INCREMENT),
            ("GET", f"/v1/namespaces/{bad}/crdts/gc:x", b""),
            ("GET", f"/v1/namespaces/app/crdts/{bad}", b""),
            ("DELETE", f"/v1/namespaces/app/crdts/{bad}", b""),
            ("GET", f"/v1/namespaces/app/crdts/{bad}/events", b""),
            ("GET", f"/v1/namespaces/{bad}/crdts", b""),
            ("GET", f"/v1/namespaces/{bad}/tokens/me", b""),
            ("POST", f"/v1/namespaces/{bad}/tokens", b'{"client_id":1,"permissions":{}}'),
        ]:
            status, answer = status_and_body(port, method, path, body)
            assert status == 400, (method, path, status, answer)
            assert answer["error"] in ("invalid_namespace", "invalid_id"), (path, answer)
        status, answer = status_and_body(
            port, "GET", f"/v1/namespaces/app/crdts?prefix={bad}&cursor={bad}"
        )
        assert (status, answer.get("crdts")) == (200, []) or answer["error"] == "bad_request"
        # The WebSocket upgrade's namespace
        status, answer = status_and_body(port, "GET", f"/v1/namespaces/{bad}/ws?token={ADMIN}")
        assert status == 400 and answer["error"] == "invalid_namespace"
    # WebSocket messages with traversal ids (decoded already: no % here)
    frames = b""
    for bad in ["../../" + MARKER, "/tmp/" + MARKER, "..\\" + MARKER, MARKER + "\x00", "a/b"]:
        frames += client_frame(0x2, msgpack.packb({"kind": "subscribe", "id": bad, "ref": 1}))
        frames += client_frame(
            0x2, msgpack.packb({"kind": "op", "id": bad, "ref": 2, "op": {"op": "increment"}})
        )
    messages = check_ws_transcript(parse_server_frames(ws_case(port, ADMIN, frames, sync=True)))
    errors = [m["error"] for m in messages if m["kind"] == "error"]
    assert errors == ["invalid_id"] * 10, messages
    # Path-like names that are valid are plain keys.
    for ns in PATHLIKE_NAMESPACES:
        for crdt_id in PATHLIKE_IDS:
            status, answer = status_and_body(
                port, "POST", f"/v1/namespaces/{ns}/crdts/{crdt_id}/ops", INCREMENT
            )
            assert status == 200, (ns, crdt_id, answer)
    frames = b"".join(
        client_frame(
            0x2,
            msgpack.packb(
                {"kind": "op", "id": i, "ref": n, "op": {"op": "increment", "type": "gcounter"}}
            ),
        )
        for n, i in enumerate(PATHLIKE_IDS)
    )
    messages = check_ws_transcript(parse_server_frames(ws_case(port, ADMIN, frames, sync=True)))
    assert [m["kind"] for m in messages if m["kind"] in ("ack", "error")] == ["ack"] * len(
        PATHLIKE_IDS
    )


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def named_like_marker(roots: list[Path]) -> list[str]:
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".venv", "node_modules", ".git")]
            found += [os.path.join(dirpath, n) for n in dirnames + filenames if MARKER in n]
    return found


def test_names_never_reach_the_file_system(
    spawn_server: Callable[..., Subprocess], tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "secret.txt"
    sentinel.write_text("do not touch")
    before = sentinel.stat()
    data_dir = tmp_path / "data"
    server = spawn_server()
    attack(server.port)
    # An id named like one of the store's files is just an unknown key.
    for name in ("00000000000000000001.seg", "admin_token", "secret.txt"):
        status, answer = status_and_body(server.port, "GET", f"/v1/namespaces/app/crdts/{name}")
        assert status == 404 and answer["error"] == "not_found", answer
    assert server.terminate() == 0
    # Only the store's own layout, nothing beside it, nothing named after a payload.
    layout = files_under(data_dir)
    assert all(LAYOUT.match(name) for name in layout), sorted(layout)
    assert files_under(tmp_path) - {f"data/{n}" for n in layout} == {
        "data",
        "outside",
        "outside/secret.txt",
        "server0.log",
    }
    assert (
        sentinel.read_text() == "do not touch" and sentinel.stat().st_mtime_ns == before.st_mtime_ns
    )
    cwd = Path.cwd()
    assert named_like_marker([tmp_path, cwd, Path("/tmp")]) == []
    # After a restart the path-like ids come back from the log, as keys: one
    # increment each over HTTP in the path-like namespaces, over WS in "app".
    server = spawn_server()
    for ns in [*PATHLIKE_NAMESPACES, "app"]:
        for crdt_id in PATHLIKE_IDS:
            path = f"/v1/namespaces/{ns}/crdts/{crdt_id}"
            status, answer = status_and_body(server.port, "GET", path)
            assert status == 200 and (answer["id"], answer["value"]) == (crdt_id, 1), answer
    # ".." is a fine id but no namespace
    status, answer = status_and_body(server.port, "GET", "/v1/namespaces/%2e%2e/crdts/gc:x")
    assert status == 400 and answer["error"] == "invalid_namespace"


STORE_MODULES = [
    "tail.py",
    "memory.py",
    *(
        f"embedded/{p.name}"
        for p in sorted((Path(syncd.store.__file__).parent / "embedded").glob("*.py"))
    ),
]
"""Every module of the embedded store, and the shared ones that touch files."""
PATH_CALLS = {"join", "open", "Path", "unlink", "rename", "replace", "mkdir", "makedirs", "link"}
NAME_WORDS = {"ns", "namespace", "crdt_id", "id", "key", "record"}


def test_store_paths_are_built_from_fixed_names_only() -> None:
    """Every path the file store builds (os.path.join, open, Path, ...) is made
    of its directory, fixed names and log sequence numbers: no argument
    mentions a namespace, id or record."""
    store_dir = Path(syncd.store.__file__).parent
    offenders = []
    examined = 0
    for module in STORE_MODULES:
        tree = ast.parse((store_dir / module).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called not in PATH_CALLS:
                continue
            examined += 1
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                names = {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(arg) if isinstance(n, ast.Attribute)}
                if names & NAME_WORDS:
                    offenders.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []
    assert examined >= 10  # the scan saw the store's path building
