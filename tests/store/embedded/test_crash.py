"""The crash harness: the real server, concurrent HTTP and WebSocket writers, SIGKILL.

Each round starts a syncd server process (``syncd serve``, forked from a
process that imported syncd once) on the same data dir (SERVICE_FSYNC=batch),
runs writers for a random moment and kills the process with SIGKILL. After
the restart every acknowledged op must be there, and nothing that was never
sent: for each set, acked <= present <= attempted; for each counter,
acked <= value <= attempted. SYNCD_CRASH_ROUNDS sets the number of rounds
(20 in CI).

A SIGKILL leaves the page cache's bytes whole, so it seldom tears a write; a
power loss does. The torn-request test kills the server, then tears the last
write on disk as a power loss during it would, and restarts.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import msgpack
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from syncd.store.embedded.log import FLAG_BATCH_START, HEADER, LENGTH_MASK, list_segments
from tests.conftest import ADMIN, SIGNING_KEY_HEX, free_port, wait_ready

ROUNDS = int(os.environ.get("SYNCD_CRASH_ROUNDS", "20"))
AUTH = {"authorization": f"Bearer {ADMIN}"}
SETS = ("or:crash-a", "or:crash-b")
COUNTERS = ("gc:crash-a", "gc:crash-b")
TLS = ssl.create_default_context()
"""One context for every client (the servers speak plain HTTP; httpx makes a
context for each client otherwise, loading the CA bundle: about 0.06 s of
CPU, four writers' worth each round, and the check's)."""
FIRST_ACK_WAIT_S = 30.0
"""How long a round waits for the writers' first acknowledgement before its
random moment to the kill starts: on a loaded machine the first writes of a
fresh server took longer than that moment (0.05-0.6 s), rounds killed the
server before any write was answered and the test failed, 'the writers
barely wrote'. The wait is bounded: a server that answers none fails."""


# A process that has imported the server once and forks a fresh one per
# start: each server is still a process of its own on the data dir, with its
# own loop, killed with SIGKILL; only the interpreter's start and the
# imports (about 1.2 s of each of the 21 starts) are not paid again.
_FORKING_SERVER = textwrap.dedent(
    """
    import json, logging, os, sys, threading, time, traceback
    import uvloop
    import syncd.server
    from syncd.cli import main

    for line in sys.stdin:
        ask = json.loads(line)
        if "start" in ask:
            assert threading.active_count() == 1, threading.enumerate()  # safe to fork
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    null = os.open(os.devnull, os.O_RDONLY)
                    log = os.open(ask["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    os.dup2(null, 0)
                    os.dup2(log, 1)
                    os.dup2(log, 2)
                    os.environ.clear()
                    os.environ.update(ask["start"])
                    code = main(["serve"])
                except BaseException:
                    traceback.print_exc()
                finally:
                    logging.shutdown()
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            answer = pid
        else:
            deadline = time.monotonic() + ask["timeout"]
            while True:
                done, status = os.waitpid(ask["wait"], os.WNOHANG)
                if done or time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            answer = os.waitstatus_to_exitcode(status) if done else None
        print(json.dumps(answer), flush=True)
    """
)


class ForkedProcess:
    """The part of ``subprocess.Popen`` the harness uses, for a server forked
    by the forking process (its parent, which alone can reap it)."""

    def __init__(self, forker: Forker, pid: int) -> None:
        self.forker = forker
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.forker.ask({"wait": self.pid, "timeout": 0})
        return self.returncode

    def wait(self, timeout: float) -> int:
        if self.returncode is None:
            self.returncode = self.forker.ask({"wait": self.pid, "timeout": timeout})
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"server {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


@dataclass
class ForkedServer:
    proc: ForkedProcess
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def terminate(self, timeout: float = 15) -> int:
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout)


class Forker:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[ForkedServer] = []
        self.process = subprocess.Popen(
            [sys.executable, "-c", _FORKING_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, question: dict[str, Any]) -> Any:
        stdin: IO[str] | None = self.process.stdin
        stdout: IO[str] | None = self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(question) + "\n")
        stdin.flush()
        return json.loads(stdout.readline())

    def __call__(self, env: dict[str, str]) -> ForkedServer:
        """A server on ``env`` (over the suite's test settings), once it answers."""
        port = free_port()
        full_env = {
            **os.environ,
            "SERVICE_BIND": f"127.0.0.1:{port}",
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_ADMIN_TOKEN": ADMIN,
            **env,
        }
        log_path = self.tmp_path / f"server{len(self.started)}.log"
        pid = self.ask({"start": full_env, "log": str(log_path)})
        server = ForkedServer(ForkedProcess(self, pid), port, log_path)
        self.started.append(server)
        wait_ready(port, server.proc)  # type: ignore[arg-type]
        return server

    def close(self) -> None:
        for server in self.started:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(10)
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


@pytest.fixture
def fork_server(tmp_path: Path) -> Iterator[Forker]:
    forker = Forker(tmp_path)
    yield forker
    forker.close()


@dataclass
class Model:
    acked: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in SETS})
    attempted: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in SETS})
    count_acked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    count_attempted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))


async def http_writer(url: str, model: Model, name: str, rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5, verify=TLS) as client:
        i = 0
        while True:
            i += 1
            if rng.random() < 0.5:
                crdt = rng.choice(SETS)
                element = f"{name}-{i}"
                model.attempted[crdt].add(element)
                body: Any = {"op": "add", "element": element}
            else:
                crdt = rng.choice(COUNTERS)
                model.count_attempted[crdt] += 1
                body = {"op": "increment"}
            try:
                r = await client.post(
                    f"/v1/namespaces/crash/crdts/{crdt}/ops", json=body, headers=AUTH
                )
            except httpx.HTTPError:
                return
            assert r.status_code == 200, r.text
            if crdt in SETS:
                model.acked[crdt].add(body["element"])
            else:
                model.count_acked[crdt] += 1


async def ws_writer(port: int, model: Model, name: str, rng: random.Random) -> None:
    url = f"ws://127.0.0.1:{port}/v1/namespaces/crash/ws?token={ADMIN}"
    try:
        async with connect(url, proxy=None, compression=None, ping_interval=None) as ws:
            i = 0
            while True:
                i += 1
                crdt = rng.choice(SETS)
                element = f"{name}-{i}"
                model.attempted[crdt].add(element)
                await ws.send(
                    msgpack.packb(
                        {
                            "kind": "op",
                            "id": crdt,
                            "ref": i,
                            "op": {"op": "add", "element": element},
                        }
                    )
                )
                answer = msgpack.unpackb(await ws.recv())
                assert answer == {"kind": "ack", "ref": i, "seq": answer["seq"], "applied": 1}, (
                    answer
                )
                model.acked[crdt].add(element)
    except (WebSocketException, OSError):
        return


async def check(url: str, model: Model) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5, verify=TLS) as client:
        for crdt in SETS:
            r = await client.get(f"/v1/namespaces/crash/crdts/{crdt}", headers=AUTH)
            present = set(r.json()["value"]) if r.status_code == 200 else set()
            lost = model.acked[crdt] - present
            assert not lost, f"{crdt}: acknowledged adds lost: {sorted(lost)[:5]}"
            invented = present - model.attempted[crdt]
            assert not invented, f"{crdt}: elements never sent: {sorted(invented)[:5]}"
        for crdt in COUNTERS:
            r = await client.get(f"/v1/namespaces/crash/crdts/{crdt}", headers=AUTH)
            value = r.json()["value"] if r.status_code == 200 else 0
            assert model.count_acked[crdt] <= value <= model.count_attempted[crdt], crdt


def acked_total(model: Model) -> int:
    return sum(len(s) for s in model.acked.values()) + sum(model.count_acked.values())


async def first_ack(model: Model, before: int, writers: list[asyncio.Task[None]]) -> None:
    """Until a write of this round is acknowledged (see FIRST_ACK_WAIT_S)."""
    deadline = time.monotonic() + FIRST_ACK_WAIT_S
    while acked_total(model) <= before:
        if any(w.done() for w in writers) or time.monotonic() > deadline:
            return  # a writer failed (gather raises it) or none was answered (the check fails)
        await asyncio.sleep(0.01)


async def test_sigkill_under_concurrent_writers_loses_nothing_acknowledged(
    fork_server: Forker, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SYNCD_CRASH_SEED", random.randrange(1 << 30)))
    print(f"crash harness seed {seed} ({ROUNDS} rounds)")
    rng = random.Random(seed)
    model = Model()
    env = {"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(tmp_path / "crash-data")}
    total_acked = 0
    for round_no in range(ROUNDS):
        server = fork_server(env)
        await check(server.url, model)
        writers = [
            asyncio.create_task(
                http_writer(server.url, model, f"h{round_no}.{n}", random.Random(rng.random()))
            )
            for n in range(4)
        ] + [
            asyncio.create_task(
                ws_writer(server.port, model, f"w{round_no}.{n}", random.Random(rng.random()))
            )
            for n in range(2)
        ]
        await first_ack(model, total_acked, writers)
        await asyncio.sleep(rng.uniform(0.05, 0.6))
        server.proc.kill()  # SIGKILL, mid-write
        await asyncio.gather(*writers)
        server.proc.wait(10)
        total_acked = acked_total(model)
    server = fork_server(env)
    await check(server.url, model)
    assert total_acked > ROUNDS * 5, "the writers barely wrote; the harness tested nothing"
    assert server.terminate() == 0


def last_batch(segment: Path) -> list[tuple[int, int]]:
    """(start, end) of each record of the segment's last write batch (the file
    may run on with the runway's zeros)."""
    data = segment.read_bytes()
    spans: list[tuple[int, int]] = []
    off = 0
    while off + HEADER.size <= len(data):
        word, _, _ = HEADER.unpack_from(data, off)
        if not word:
            break  # the runway
        if word & FLAG_BATCH_START:
            spans = []
        end = off + HEADER.size + (word & LENGTH_MASK)
        spans.append((off, end))
        off = end
    return spans


async def test_a_multi_op_request_torn_in_its_write_comes_back_with_none_of_its_ops(
    spawn_server: Any, tmp_path: Path
) -> None:
    """A batch of ops is applied all or none: a request whose write was torn by
    a crash (never answered, as the answer waits for the write to be durable)
    leaves none of its ops, in the CRDT or its history, though its first
    records reached the disk whole (and the history files hold all of them)."""
    data_dir = tmp_path / "torn-data"
    env = {"SERVICE_FSYNC": "batch", "SERVICE_DATA_DIR": str(data_dir)}
    path = "/v1/namespaces/crash/crdts/gc:torn"
    server = spawn_server(env)
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        for _ in range(3):
            assert (await client.post(f"{path}/ops", json={"op": "increment"})).status_code == 200
        r = await client.post(f"{path}/ops", json=[{"op": "increment"}] * 50)
        assert r.status_code == 200 and r.json()["applied"] == 50
    server.kill()  # SIGKILL: the page cache's bytes stay as written
    segment = Path(list_segments(str(data_dir / "log"))[-1][1])
    batch = last_batch(segment)
    assert len(batch) == 50  # the request's write, alone
    start, end = batch[20]
    torn_at = (start + end) // 2
    with open(segment, "r+b") as f:  # the rest of the write never reached the disk
        f.truncate(torn_at)

    server = spawn_server(env)
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        r = await client.get(path)
        assert (r.json()["seq"], r.json()["value"]) == (3, 3)
        r = await client.get(f"{path}/history", params={"limit": 100})
        assert [o["seq"] for o in r.json()["ops"]] == [3, 2, 1]
        r = await client.post(f"{path}/ops", json={"op": "increment"})
        assert r.json()["seq"] == 4
    assert server.terminate() == 0
    # The log was cut at the request's first record, the history's copy of it too.
    first = batch[0][0]
    assert f"cutting {torn_at - first} bytes from offset {first}" in server.log()
    assert "hold records past the log's last sequence 3" in server.log()

    server = spawn_server(env)
    async with httpx.AsyncClient(base_url=server.url, timeout=5, headers=AUTH) as client:
        r = await client.get(path)
        assert (r.json()["seq"], r.json()["value"]) == (4, 4)
        r = await client.get(f"{path}/history", params={"limit": 100})
        assert [o["seq"] for o in r.json()["ops"]] == [4, 3, 2, 1]
    assert server.terminate() == 0
