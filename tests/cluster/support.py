"""Helpers for the cluster tests: node environments, an SSE watcher, random ops, convergence."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import time
from collections.abc import Iterable
from typing import Any

import httpx
import msgpack

from tests.conftest import ADMIN

NS = "cl"
AUTH = {"authorization": f"Bearer {ADMIN}"}
CRDTS = ("gc:c", "pn:p", "or:s", "lw:r", "rg:t", "tr:o")
HTTP_TIMEOUT_S = 10.0
SSE_LINE_LIMIT = 4 * 1024 * 1024
"""Longest SSE line the watcher reads (a base64 delta of a few MB at most here)."""


def node_env(database_url: str, node_id: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "SERVICE_NODE_ID": node_id,
        "SERVICE_LOG_LEVEL": "info",
        **extra,
    }


def client(port: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=HTTP_TIMEOUT_S
    )


class SseWatcher:
    """One SSE subscription (docs/protocol.md#the-sse-stream), read by a plain client: every delta kept."""

    def __init__(self, port: int, crdt_id: str, ns: str = NS) -> None:
        self.port = port
        self.crdt_id = crdt_id
        self.ns = ns
        self.deltas: list[dict[str, Any]] = []
        self.synced: list[tuple[int, dict[str, Any]]] = []
        """``event: synced`` (the end of the start), kept out of ``deltas``:
        (how many deltas came before it, its data)."""
        self.ended = False
        self._opened = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", self.port, limit=SSE_LINE_LIMIT
            )
        except OSError:
            self.ended = True
            self._opened.set()
            return
        try:
            path = f"/v1/namespaces/{self.ns}/crdts/{self.crdt_id}/events"
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise AssertionError(f"SSE refused: {head!r}")
            self._opened.set()
            event = b""
            while True:
                line = await reader.readline()
                if not line:
                    break
                if line.startswith(b"event: "):
                    event = line[7:].strip()
                elif line.startswith(b"data: "):
                    raw = base64.b64decode(line[6:].strip(), validate=True)
                    data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
                    if event == b"synced":
                        self.synced.append((len(self.deltas), data))
                    else:
                        self.deltas.append(data)
                elif line in (b"\n", b"\r\n"):
                    event = b""
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            self.ended = True
            self._opened.set()
            writer.close()

    async def opened(self) -> None:
        await asyncio.wait_for(self._opened.wait(), HTTP_TIMEOUT_S)
        await self.wait(lambda: bool(self.deltas))  # the first event is the snapshot

    async def wait(self, check: Any, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.crdt_id} on port {self.port}: {self.summary()}")
            await asyncio.sleep(0.02)

    def last_seq(self) -> int:
        return int(self.deltas[-1]["seq"]) if self.deltas else -1

    def summary(self) -> str:
        return ", ".join(f"{d['kind']}:{d.get('seq')}" for d in self.deltas[-20:])

    def check_in_order(self, final_seq: int, epoch: str) -> None:
        """A snapshot, the ``synced`` event at its seq and epoch (the end of the
        start), then op deltas seq+1 ... final_seq of one life, none missing."""
        first, rest = self.deltas[0], self.deltas[1:]
        assert first["kind"] == "snapshot", self.summary()
        synced = {"kind": "synced", "ns": self.ns, "id": self.crdt_id, "seq": first["seq"]}
        synced["epoch"] = first.get("epoch")  # none in a snapshot of nothing yet
        assert self.synced == [(1, synced)], (self.synced, self.summary())
        expected = list(range(int(first["seq"]) + 1, final_seq + 1))
        assert [d["kind"] for d in rest] == ["op"] * len(rest), self.summary()
        assert [d["seq"] for d in rest] == expected, self.summary()
        if rest:
            assert {d["epoch"] for d in rest} == {epoch}

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


def random_op(rng: random.Random, crdt_id: str, tag: str) -> dict[str, Any]:
    """An op that is always valid on its CRDT; ``tag`` is unique per op."""
    prefix = crdt_id[:3]
    body: dict[str, Any]
    if prefix == "gc:":
        body = {"op": "increment", "amount": rng.randint(1, 5)}
    elif prefix == "pn:":
        body = {"op": rng.choice(["increment", "decrement"]), "amount": rng.randint(1, 5)}
    elif prefix == "or:":
        body = {"op": "add", "element": tag}
    elif prefix == "lw:":
        body = {"op": "set", "value": tag}
    elif prefix == "rg:":
        body = {"op": "insert", "index": 0, "text": rng.choice("abc")}
    else:
        body = {"op": "add", "id": tag, "parent": "root", "data": {"by": tag}}
    body["op_id"] = tag
    return body


async def read_all(port: int, crdts: Iterable[str] = CRDTS) -> dict[str, Any]:
    """Every CRDT's full state on one node (None when it answers 404)."""
    async with client(port) as http:
        states: dict[str, Any] = {}
        for crdt_id in crdts:
            answer = await http.get(f"/v1/namespaces/{NS}/crdts/{crdt_id}?format=crdt")
            states[crdt_id] = answer.json() if answer.status_code == 200 else None
        return states


async def converged(
    ports: list[int], crdts: Iterable[str] = CRDTS, timeout: float = 20.0
) -> dict[str, Any]:
    """Wait until every node answers the same state for every CRDT; that state."""
    crdts = list(crdts)
    deadline = time.monotonic() + timeout
    while True:
        states = [await read_all(port, crdts) for port in ports]
        if all(s == states[0] for s in states[1:]) and all(
            v is not None for v in states[0].values()
        ):
            return states[0]
        if time.monotonic() > deadline:
            seqs = [{k: (v or {}).get("seq") for k, v in s.items()} for s in states]
            raise AssertionError(f"nodes did not converge: {seqs}")
        await asyncio.sleep(0.1)
