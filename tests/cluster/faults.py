"""Three nodes on one PostgreSQL under faults: the harness of tests/cluster/test_faults.py
and perf/studies/cluster_faults.py.

Writers on every node at once (counter increments on a few hot ids, ORSet
adds, LWW sets, RGA inserts), each op with its own op_id, retried with the
same op_id on the next node after a connection error, a timeout or a 503
until it is acknowledged. One resuming SSE subscriber per node and per
watched CRDT. During the load: SIGKILL a node and start it again, restart
PostgreSQL, SIGSTOP a node for a while. Afterwards every node must answer
the same state (value and seq) for every id, every acknowledged op must be
in it (exactly once: retries share op_ids), and every subscriber must have
seen each seq in order, up to the final one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgpack

from tests.cluster.support import AUTH, NS, converged, node_env
from tests.conftest import Subprocess, wait_ready
from tests.pgserver import ThrowawayPostgres

HOT: tuple[str, ...] = ("gc:h0", "gc:h1", "gc:h2")
IDS: tuple[str, ...] = (*HOT, "or:s", "lw:r", "rg:t")
WATCHED: tuple[str, ...] = ("gc:h0", "rg:t")

REQUEST_TIMEOUT_S = 2.0
"""A node that does not answer within this is treated as down (SIGSTOP): retry elsewhere."""
RETRY_PAUSE_S = 0.05
MEMORY_BUDGET_MB = "0.004"
"""A budget of about 4 KB: a node keeps the CRDTs its subscribers watch and
lets the others go and come back all through the run (evictions under the
faults)."""
ACK_DEADLINE_S = 60.0
"""An op not acknowledged within this (across every retry) fails the run."""

Spawn = Callable[..., Subprocess]


def op_for(crdt_id: str, tag: str) -> dict[str, Any]:
    body: dict[str, Any]
    if crdt_id.startswith("gc:"):
        body = {"op": "increment", "amount": 1}
    elif crdt_id.startswith("or:"):
        body = {"op": "add", "element": tag}
    elif crdt_id.startswith("lw:"):
        body = {"op": "set", "value": tag}
    else:
        body = {"op": "insert", "index": 0, "text": "x"}
    body["op_id"] = tag
    return body


class Writer:
    """Ops on its home node; each retried with its op_id until acknowledged."""

    def __init__(self, ports: list[int], home: int, name: str, seed: int) -> None:
        self.ports = ports
        self.home = home
        self.name = name
        self.rng = random.Random(seed)
        self.acked: list[tuple[str, dict[str, Any]]] = []
        self.retries = 0
        self.acks_by_port: dict[int, list[float]] = {}
        self._clients = {
            port: httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=REQUEST_TIMEOUT_S
            )
            for port in ports
        }

    async def run(self, stop: asyncio.Event) -> None:
        count = 0
        try:
            while not stop.is_set():
                count += 1
                crdt_id = self.rng.choice(IDS)
                await self.send(crdt_id, op_for(crdt_id, f"{self.name}-{count}"))
        finally:
            for http in self._clients.values():
                await http.aclose()

    async def send(self, crdt_id: str, body: dict[str, Any]) -> None:
        deadline = time.monotonic() + ACK_DEADLINE_S
        attempt = 0
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"{crdt_id} {body} never acknowledged")
            port = self.ports[(self.home + attempt) % len(self.ports)]
            try:
                answer = await self._clients[port].post(
                    f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", json=body
                )
            except httpx.TransportError:  # refused, reset, timed out
                answer = None
            if answer is not None and answer.status_code == 200:
                self.acked.append((crdt_id, body))
                self.acks_by_port.setdefault(port, []).append(time.monotonic())
                return
            if answer is not None and answer.status_code not in (503, 429):
                raise AssertionError(f"{crdt_id} {body}: {answer.status_code} {answer.text}")
            self.retries += 1
            attempt += 1
            await asyncio.sleep(RETRY_PAUSE_S)


class ResumingWatcher:
    """One SSE subscriber that reconnects and resumes (``since``/``epoch``) when
    its node goes away; checks that it sees each seq once, in order."""

    def __init__(self, port: int, crdt_id: str) -> None:
        self.port = port
        self.crdt_id = crdt_id
        self.epoch: str | None = None
        self.seq = 0
        self.errors: list[str] = []
        self.reconnects = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError, asyncio.IncompleteReadError):
                await self._stream()
            self.reconnects += 1
            await asyncio.sleep(0.1)

    async def _stream(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 22)
        try:
            query = f"?since={self.seq}&epoch={self.epoch}" if self.epoch else ""
            path = f"/v1/namespaces/{NS}/crdts/{self.crdt_id}/events{query}"
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['authorization']}"
                "\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                return  # 404 before the first op, 503 while the node recovers: try again
            event, synced = b"", False
            while line := await reader.readline():
                if line.startswith(b"event: "):
                    event = line[7:].strip()
                elif line.startswith(b"data: "):
                    raw = base64.b64decode(line[6:].strip(), validate=True)
                    data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
                    if event == b"synced":
                        self._synced(data, again=synced)
                        synced = True
                    else:
                        self._see(data)
                elif line in (b"\n", b"\r\n"):
                    event = b""
        finally:
            writer.close()

    def _synced(self, message: dict[str, Any], *, again: bool) -> None:
        """The start (snapshot, replay or nothing) ended: once per stream, at
        where it left this reader."""
        if again:
            self.errors.append(f"a second synced in one stream: {message}")
        position = (message.get("kind"), message.get("seq"), message.get("epoch"))
        if position != ("synced", self.seq, self.epoch):
            self.errors.append(f"synced at {position[1:]} after {(self.seq, self.epoch)}")

    def _see(self, delta: dict[str, Any]) -> None:
        kind, seq = delta.get("kind"), int(delta.get("seq", 0))
        if kind == "op" and self.epoch is None and seq == 1:
            self.epoch = delta.get("epoch")  # the first op of a CRDT this stream saw born
        if kind == "snapshot":
            if self.epoch == delta.get("epoch") and seq < self.seq:
                self.errors.append(f"snapshot at {seq} after seq {self.seq}")
            self.epoch, self.seq = delta.get("epoch"), seq
        elif kind == "op":
            if delta.get("epoch") != self.epoch or seq != self.seq + 1:
                self.errors.append(f"op {seq} after {self.seq} ({delta.get('epoch')})")
            self.epoch, self.seq = delta.get("epoch"), seq
        else:
            self.errors.append(f"unexpected {kind}")

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task


@dataclass
class Report:
    acked: int = 0
    retries: int = 0
    seconds: float = 0.0
    evictions: int = 0
    """CRDTs the nodes let go from memory during the run (all nodes)."""
    recovery_s: dict[str, float] = field(default_factory=dict)
    """Per fault: from the fault (or the restart) to the next op acknowledged there."""

    @property
    def ops_per_s(self) -> float:
        return self.acked / self.seconds if self.seconds else 0.0


def first_ack_after(writers: list[Writer], port: int | None, since: float) -> float | None:
    times = [
        t
        for w in writers
        for p, acks in w.acks_by_port.items()
        if port is None or p == port
        for t in acks
        if t > since
    ]
    return min(times) - since if times else None


async def wait_first_ack(
    writers: list[Writer], port: int | None, since: float, timeout: float = 30.0
) -> float:
    deadline = time.monotonic() + timeout
    while (found := first_ack_after(writers, port, since)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"no op acknowledged on {port} after the fault")
        await asyncio.sleep(0.02)
    return found


async def run_faults(
    spawn: Spawn,
    pg: ThrowawayPostgres,
    *,
    writers_per_node: int = 2,
    phase_s: float = 1.5,
    stop_s: float = 10.0,
    memory_budget_mb: str = MEMORY_BUDGET_MB,
) -> Report:
    """The whole scenario; raises AssertionError on any broken promise."""
    url = f"{pg.url}/postgres"
    envs = [
        # The default op_id memory (1024 ids and 120 s) must cover the 10 s stop:
        # the stopped node reads its client's abandoned request only after SIGCONT.
        node_env(
            url,
            f"node{i}",
            SERVICE_RATE_LIMIT="1000000",
            SERVICE_MEMORY_BUDGET_MB=memory_budget_mb,
        )
        for i in range(3)
    ]
    nodes = [spawn(env, ready=False) for env in envs]
    for node in nodes:
        wait_ready(node.port, node.proc)
    ports = [n.port for n in nodes]
    watchers = [ResumingWatcher(port, crdt_id) for port in ports for crdt_id in WATCHED]
    writers = [Writer(ports, i % 3, f"w{i}", seed=i) for i in range(writers_per_node * len(ports))]
    stop = asyncio.Event()
    report = Report()
    started = time.monotonic()
    running = [asyncio.create_task(w.run(stop)) for w in writers]
    try:
        await asyncio.sleep(phase_s)

        # 1. SIGKILL node 2 and start it again on the same port.
        killed_at = time.monotonic()
        nodes[2].kill()
        await asyncio.sleep(phase_s / 2)
        nodes[2] = spawn(envs[2], port=ports[2], ready=False)
        await asyncio.to_thread(wait_ready, ports[2], nodes[2].proc)
        ready_at = time.monotonic()
        first = await wait_first_ack(writers, ports[2], ready_at)
        report.recovery_s["node killed: ready to first ack"] = first
        report.recovery_s["node killed: kill to first ack again"] = ready_at - killed_at + first
        await asyncio.sleep(phase_s)

        # 2. Restart PostgreSQL under the load.
        restarted_at = time.monotonic()
        await asyncio.to_thread(pg.restart)
        done_at = time.monotonic()
        report.recovery_s["PostgreSQL restart: its duration"] = done_at - restarted_at
        for port in ports:
            report.recovery_s[f"PostgreSQL restart: first ack on {port}"] = await wait_first_ack(
                writers, port, done_at
            )
        await asyncio.sleep(phase_s)

        # 3. SIGSTOP node 1 (its clients time out and go elsewhere), then SIGCONT.
        os.kill(nodes[1].proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(stop_s)
        finally:
            os.kill(nodes[1].proc.pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        report.recovery_s["node stopped: SIGCONT to first ack"] = await wait_first_ack(
            writers, ports[1], resumed_at
        )
        await asyncio.sleep(phase_s)
    finally:
        stop.set()
        results = await asyncio.gather(*running, return_exceptions=True)
    report.seconds = time.monotonic() - started
    for result in results:
        if isinstance(result, BaseException):
            raise result
    report.acked = sum(len(w.acked) for w in writers)
    report.retries = sum(w.retries for w in writers)

    state = await converged(ports, IDS, timeout=30)  # full CRDT state and seq, per node
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{ports[0]}", headers=AUTH, timeout=REQUEST_TIMEOUT_S
    ) as http:
        values = {
            crdt_id: (await http.get(f"/v1/namespaces/{NS}/crdts/{crdt_id}")).json()
            for crdt_id in IDS
        }
    check_acknowledged(values, writers)
    report.evictions = sum([await _evictions(port) for port in ports])
    try:
        for watcher in watchers:
            deadline = time.monotonic() + 20
            final = state[watcher.crdt_id]["seq"]
            while watcher.seq < final and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        problems = [(w.port, w.crdt_id, w.errors[:8]) for w in watchers if w.errors]
        assert problems == [], problems
        for watcher in watchers:
            final = state[watcher.crdt_id]["seq"]
            assert watcher.seq == final, (watcher.port, watcher.crdt_id, watcher.seq, final)
    finally:
        for watcher in watchers:
            await watcher.close()
    return report


async def _evictions(port: int) -> int:
    """service_engine_evictions_total of one node."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("service_engine_evictions_total "):
            return int(float(line.split()[1]))
    return 0


def check_acknowledged(state: dict[str, Any], writers: list[Writer]) -> None:
    """Every acknowledged op is in the state, exactly once."""
    acked = [entry for w in writers for entry in w.acked]
    for crdt_id in HOT:
        increments = sum(1 for c, _ in acked if c == crdt_id)
        assert state[crdt_id]["value"] == increments, (crdt_id, state[crdt_id], increments)
    elements = {body["element"] for c, body in acked if c == "or:s"}
    assert set(state["or:s"]["value"]) == elements
    values = {body["value"] for c, body in acked if c == "lw:r"}
    assert state["lw:r"]["value"] in values
    inserts = sum(1 for c, _ in acked if c == "rg:t")
    assert len(state["rg:t"]["value"]) == inserts
