"""Three ``python -m syncd`` processes on one PostgreSQL database.

Random ops on every node with SSE subscribers on every node: after quiescence
every node answers the same state for every CRDT, every subscriber saw every
seq in order, and no acknowledged op is missing, also across a node killed
with SIGKILL and restarted, a 50 KB delta (the replication stream) and a
restart of PostgreSQL itself.
"""

from __future__ import annotations

import asyncio
import base64
import random
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx
import msgpack
import psycopg
import pytest

from tests.cluster.pgdb import database_url
from tests.cluster.support import (
    CRDTS,
    NS,
    SseWatcher,
    client,
    converged,
    node_env,
    random_op,
)
from tests.conftest import Subprocess, wait_ready
from tests.pgserver import ThrowawayPostgres

pytestmark = pytest.mark.timeout(90)

Spawn = Callable[..., Subprocess]


class Writer:
    """Random ops against one node; remembers what was acknowledged."""

    def __init__(self, port: int, name: str, seed: int) -> None:
        self.port = port
        self.name = name
        self.rng = random.Random(seed)
        self.acked: list[tuple[str, dict[str, Any]]] = []
        self.unavailable = 0
        self.count = 0

    async def run(self, n: int, crdts: tuple[str, ...] = CRDTS, *, pause: float = 0.0) -> None:
        async with client(self.port) as http:
            for _ in range(n):
                self.count += 1
                crdt_id = self.rng.choice(crdts)
                body = random_op(self.rng, crdt_id, f"{self.name}-{self.count}")
                try:
                    answer = await http.post(f"/v1/namespaces/{NS}/crdts/{crdt_id}/ops", json=body)
                except httpx.TransportError:
                    return  # the node is gone (killed)
                if answer.status_code == 200:
                    self.acked.append((crdt_id, body))
                elif answer.status_code == 503:
                    self.unavailable += 1
                else:
                    raise AssertionError(f"{crdt_id} {body}: {answer.status_code} {answer.text}")
                if pause:
                    await asyncio.sleep(pause)


async def read_values(port: int) -> dict[str, Any]:
    async with client(port) as http:
        out = {}
        for crdt_id in ("or:s", "tr:o", "gc:c"):
            answer = await http.get(f"/v1/namespaces/{NS}/crdts/{crdt_id}")
            out[crdt_id] = answer.json()
        return out


def check_acked_visible(values: dict[str, Any], writers: list[Writer]) -> None:
    """Every acknowledged op is in the state (its unique tag is there)."""
    elements = set(values["or:s"]["value"])
    children = {child["id"] for child in values["tr:o"]["value"]["children"]}
    gc_total = 0
    for crdt_id, body in (entry for w in writers for entry in w.acked):
        if crdt_id == "or:s":
            assert body["element"] in elements
        elif crdt_id == "tr:o":
            assert body["id"] in children
        elif crdt_id == "gc:c":
            gc_total += body["amount"]
    assert values["gc:c"]["value"] >= gc_total  # more when an unanswered op committed


async def watch_all(ports: list[int]) -> list[SseWatcher]:
    watchers = [SseWatcher(port, crdt_id) for port in ports for crdt_id in CRDTS]
    for watcher in watchers:
        await watcher.opened()
    return watchers


def check_watchers(watchers: list[SseWatcher], state: dict[str, Any]) -> None:
    for watcher in watchers:
        final = state[watcher.crdt_id]
        assert not watcher.ended, f"{watcher.crdt_id} on {watcher.port} ended"
        watcher.check_in_order(final["seq"], final["epoch"])


async def wait_delivered(watchers: list[SseWatcher], state: dict[str, Any]) -> None:
    for watcher in watchers:
        final = state[watcher.crdt_id]["seq"]
        await watcher.wait(lambda w=watcher, s=final: w.last_seq() >= s)


async def test_three_nodes_converge_with_one_killed_and_restarted(
    spawn_server: Spawn, cluster_db: str
) -> None:
    url = database_url(cluster_db)
    envs = [node_env(url, f"node{i}") for i in range(3)]
    nodes = spawn_all(spawn_server, envs)
    ports = [n.port for n in nodes]
    watchers = await watch_all(ports)

    writers = [Writer(ports[i % 3], f"w{i}", seed=i) for i in range(6)]
    await asyncio.gather(*(w.run(25) for w in writers))

    # SIGKILL node 2 in the middle of its writes, keep writing elsewhere, restart it.
    victims = [w for w in writers if w.port == ports[2]]
    running = [asyncio.create_task(w.run(200, pause=0.005)) for w in victims]
    others = asyncio.gather(*(w.run(20) for w in writers if w.port != ports[2]))
    await asyncio.sleep(0.3)
    nodes[2].kill()
    await asyncio.gather(*running)
    await others
    nodes[2] = spawn_server(envs[2], port=ports[2])
    survivors = [w for w in watchers if w.port != ports[2]]
    late = await watch_all([ports[2]])
    await asyncio.gather(*(w.run(15) for w in writers))

    state = await converged(ports)
    watchers = survivors + late
    await wait_delivered(watchers, state)
    check_watchers(watchers, state)
    for port in ports:
        check_acked_visible(await read_values(port), writers)
    assert sum(len(w.acked) for w in writers) >= 6 * 25
    for watcher in watchers:
        await watcher.close()


def spawn_all(spawn: Spawn, envs: list[dict[str, str]]) -> list[Subprocess]:
    """Start the nodes side by side (each takes a while to import), then wait for all."""
    nodes = [spawn(env, ready=False) for env in envs]
    for node in nodes:
        wait_ready(node.port, node.proc)
    return nodes


def large_seqs_notified(payloads: list[str]) -> set[int]:
    """The seqs of the op records (or references) the notifications carried."""
    seqs: set[int] = set()
    for payload in payloads:
        _node, kind, body = msgpack.unpackb(base64.b64decode(payload), raw=False)
        if kind == "r":
            seqs.update(msgpack.unpackb(r, raw=False)["seq"] for r in body)
        elif kind == "ref":
            seqs.add(body[3])
    return seqs


async def wait_slots(url: str, prefix: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
            cur = await c.execute(
                "SELECT count(*) FROM pg_replication_slots"
                " WHERE slot_name LIKE %s AND temporary AND active",
                (prefix + "%",),
            )
            row = await cur.fetchone()
        if row is not None and row[0] == count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{row} replication slots, expected {count}")
        await asyncio.sleep(0.1)


def wal_env(url: str, prefix: str) -> dict[str, str]:
    return {
        "SERVICE_WAL_CONNSTR": url,
        "SERVICE_WAL_SLOT": prefix,
        "SERVICE_WAL_PUB": prefix + "_pub",
    }


async def test_a_50kb_delta_travels_on_the_replication_stream(
    spawn_server: Spawn, cluster_db: str
) -> None:
    url = database_url(cluster_db)
    prefix = "t" + secrets.token_hex(4)
    envs = [node_env(url, f"node{i}", **wal_env(url, prefix)) for i in range(3)]
    nodes = spawn_all(spawn_server, envs)
    await wait_slots(url, prefix, 3)
    listener = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await listener.execute('LISTEN "syncd:public"')
    watchers = [SseWatcher(n.port, "lw:big") for n in nodes[1:]]
    for watcher in watchers:
        await watcher.opened()
    value = secrets.token_hex(25_000)  # 50 KB that do not compress away
    async with client(nodes[0].port) as http:
        answer = await http.post(
            f"/v1/namespaces/{NS}/crdts/lw:big/ops", json={"op": "set", "value": "small"}
        )
        assert answer.status_code == 200
        for watcher in watchers:
            await watcher.wait(lambda w=watcher: w.last_seq() == 1)
        answer = await http.post(
            f"/v1/namespaces/{NS}/crdts/lw:big/ops", json={"op": "set", "value": value}
        )
        assert answer.status_code == 200 and answer.json()["seq"] == 2
    for watcher in watchers:
        await watcher.wait(lambda w=watcher: w.last_seq() == 2, timeout=10)
        assert watcher.deltas[-1]["op"]["value"] == value
    payloads = [n.payload async for n in listener.notifies(timeout=0.5)]
    await listener.close()
    # Only the small op was notified: the large one came on the stream.
    assert large_seqs_notified(payloads) == {1}
    for watcher in watchers:
        await watcher.close()


async def test_postgres_restart_mid_run(spawn_server: Spawn, own_pg: ThrowawayPostgres) -> None:
    url = f"{own_pg.url}/postgres"
    prefix = "t" + secrets.token_hex(4)
    envs = [node_env(url, f"node{i}", **wal_env(url, prefix)) for i in range(3)]
    nodes = spawn_all(spawn_server, envs)
    ports = [n.port for n in nodes]
    await wait_slots(url, prefix, 3)
    watchers = await watch_all(ports)
    not_ready: set[int] = set()
    stop = asyncio.Event()

    async def watch_readiness(port: int) -> None:
        async with client(port) as http:
            while not stop.is_set():
                answer = await http.get("/health/ready")
                if answer.status_code == 503:
                    assert answer.json()["status"] == "unavailable"
                    not_ready.add(port)
                await asyncio.sleep(0.05)

    monitors = [asyncio.create_task(watch_readiness(p)) for p in ports]
    writers = [Writer(ports[i % 3], f"w{i}", seed=100 + i) for i in range(3)]
    running = [asyncio.create_task(w.run(10_000, pause=0.01)) for w in writers]
    await asyncio.sleep(0.5)
    await asyncio.to_thread(own_pg.restart)
    # Keep writing until every node has taken writes again for a while.
    counts = [len(w.acked) for w in writers]
    deadline = time.monotonic() + 30
    while any(len(w.acked) < c + 10 for w, c in zip(writers, counts, strict=True)):
        assert time.monotonic() < deadline, "writes did not resume"
        await asyncio.sleep(0.1)
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    stop.set()
    await asyncio.gather(*monitors)

    assert not_ready == set(ports)  # every node said so while PostgreSQL was down
    assert sum(w.unavailable for w in writers) > 0
    state = await converged(ports)
    await wait_delivered(watchers, state)
    check_watchers(watchers, state)
    for port in ports:
        check_acked_visible(await read_values(port), writers)
    for watcher in watchers:
        await watcher.close()
