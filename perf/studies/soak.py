"""Soak: minutes of mixed load with connects and disconnects; are memory and fds flat?

Run by hand::

    python -m perf.studies.soak                 # 10 minutes
    python -m perf.studies.soak --minutes 3 --sample 5

A real server runs as a subprocess (its log in a temporary file). This process
drives, all at once and for the whole run:

- HTTP clients: ops on every CRDT type, reads, listings, ``tokens/me``, token
  issues, a share of refused requests; each reconnects every few dozen
  requests;
- WebSocket clients: connect, subscribe to a few CRDTs, write (presence too),
  read deltas for a while, then leave (politely or by dropping the socket);
- SSE readers: follow a CRDT for a while (sometimes resuming with ``since``),
  then hang up;
- now and then a CRDT is deleted, so subscribers see ``deleted`` and new lives.

State is kept bounded on purpose (a fixed pool of ids, elements, tree nodes;
rga documents trimmed), so a server without leaks should level off. Every
``--sample`` seconds the server's RSS and open file descriptors are read from
``/proc/<pid>``. After the warm-up (``--warmup``, default a fifth of the run)
the report says whether each is flat: the median of the last quarter of the
samples against the median of the first quarter, within a tolerance. After the
load stops, the idle fd count must return to what it was before the load.
The server log is scanned for tracebacks and errors.

Exit status 0 when everything is flat and the log is clean, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from perf.lib.servers import ADMIN, ROOT, SIGNING_KEY, free_port, wait_port
from perf.lib.table import table

NS = "soak"
TYPES = {
    "gc": {"op": "increment"},
    "pn": {"op": "decrement"},
    "lw": {"op": "set"},
}
CRDT_POOL = 12
"""Ids per type: small, so state is bounded and subscribers share CRDTs."""
ELEMENT_POOL = 64
TREE_NODES = 16
RGA_MAX = 200
"""An rga document longer than this is trimmed by the writers."""
RSS_TOLERANCE_BYTES = 8 * 1024 * 1024
RSS_TOLERANCE_SHARE = 0.05
"""RSS is flat when the late median exceeds the early one by at most the larger
of these (allocator noise, connection churn at the sampled instant)."""
FD_TOLERANCE = 24
"""fds in use vary with the connections open at the sampled instant."""


@dataclass
class Counters:
    http: int = 0
    http_errors: int = 0
    refused: int = 0
    ws_sessions: int = 0
    ws_messages: int = 0
    sse_sessions: int = 0
    sse_events: int = 0
    deletes: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        if len(self.failures) < 20:
            self.failures.append(what)


# --- the server ------------------------------------------------------------------


def start_server(data_dir: str, log_path: Path, fsync: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": data_dir,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_SIGNING_KEY": SIGNING_KEY,
        "SERVICE_FSYNC": fsync,
        "SERVICE_RATE_LIMIT": "1000000",
        "SERVICE_LOG_LEVEL": "info",
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncd"], env=env, cwd=ROOT, stdout=log, stderr=log
        )
    wait_port(port, proc)
    return proc, port


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# --- a small HTTP/1.1 client -------------------------------------------------------


class Http:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: Any = None, token: str = ADMIN
    ) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: soak\r\nAuthorization: Bearer {token}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + data)
        status_line = await self.reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ")[1])
        length = 0
        close = False
        while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, json.loads(payload) if payload else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def crdt_id(rng: random.Random, prefix: str | None = None) -> str:
    prefix = prefix or rng.choice(["gc", "pn", "or", "lw", "rg", "tr", "pr"])
    return f"{prefix}:{rng.randrange(CRDT_POOL)}"


def random_op(rng: random.Random, crdt: str, rga_len: dict[str, int]) -> Any:
    prefix = crdt.split(":")[0]
    if prefix == "gc":
        return {"op": "increment", "amount": rng.randint(1, 5)}
    if prefix == "pn":
        return {"op": rng.choice(["increment", "decrement"]), "amount": rng.randint(1, 5)}
    if prefix == "or":
        return {"op": rng.choice(["add", "remove"]), "element": f"e{rng.randrange(ELEMENT_POOL)}"}
    if prefix == "lw":
        return {"op": "set", "value": {"n": rng.random(), "s": "x" * rng.randrange(200)}}
    if prefix == "pr":
        return {"op": "update", "data": {"cursor": rng.randrange(1000)}, "ttl_ms": 5000}
    if prefix == "rg":
        length = rga_len.get(crdt, 0)
        if length > RGA_MAX:
            return {"op": "delete", "index": 0, "count": length - RGA_MAX // 2}
        return {"op": "insert", "index": 0, "text": "soak"}
    node = f"n{rng.randrange(TREE_NODES)}"
    kind = rng.choice(["add", "add", "delete", "update"])
    if kind == "add":
        return {"op": "add", "id": node, "parent": "root", "data": {"v": rng.randrange(9)}}
    if kind == "update":
        return {"op": "update", "id": node, "data": {"v": rng.randrange(9)}}
    return {"op": "delete", "id": node}


# --- load ---------------------------------------------------------------------------


async def http_worker(port: int, token: str, stop: asyncio.Event, c: Counters, seed: int) -> None:
    rng = random.Random(seed)
    rga_len: dict[str, int] = {}
    client = Http(port)
    since_reconnect = 0
    while not stop.is_set():
        crdt = crdt_id(rng)
        roll = rng.random()
        try:
            if roll < 0.55:
                status, body = await client.request(
                    "POST",
                    f"/v1/namespaces/{NS}/crdts/{crdt}/ops?return=state",
                    random_op(rng, crdt, rga_len),
                    token,
                )
                if status == 200 and crdt.startswith("rg:"):
                    rga_len[crdt] = len((body.get("state") or {}).get("value") or [])
                elif status == 400 and body["error"] == "invalid_op":
                    # a random op the state refuses (deleting a missing tree
                    # node, an rga index past the end): an answer, not a fault
                    c.refused += 1
                    status = 200
            elif roll < 0.8:
                status, _ = await client.request(
                    "GET", f"/v1/namespaces/{NS}/crdts/{crdt}", token=token
                )
            elif roll < 0.87:
                status, _ = await client.request(
                    "GET", f"/v1/namespaces/{NS}/crdts?limit=50", token=token
                )
            elif roll < 0.92:
                status, _ = await client.request(
                    "GET", f"/v1/namespaces/{NS}/tokens/me", token=token
                )
            elif roll < 0.95:
                status, _ = await client.request(
                    "POST",
                    f"/v1/namespaces/{NS}/tokens",
                    {"client_id": rng.randrange(1000), "permissions": {"read": ["*"], "write": []}},
                )
            elif roll < 0.99:
                # refused on purpose: the error paths soak too
                status, _ = await client.request(
                    "POST", f"/v1/namespaces/{NS}/crdts/gc:0/ops", {"op": "nope"}, token
                )
                status = 200 if status == 400 else status
            else:
                status, _ = await client.request("DELETE", f"/v1/namespaces/{NS}/crdts/{crdt}")
                c.deletes += status == 204
                status = 200 if status in (204, 404) else status
            c.http += 1
            if status not in (200, 404):
                c.http_errors += 1
                c.fail(f"http {status}")
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            c.http_errors += 1
            c.fail(f"http {type(exc).__name__}: {exc}")
            client.close()
        since_reconnect += 1
        if since_reconnect >= rng.randint(5, 60):
            client.close()
            since_reconnect = 0
    client.close()


def ws_frame(message: dict[str, Any]) -> bytes:
    payload = msgpack.packb(message)
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", 0x82, 0x80 | length)
    else:
        header = struct.pack("!BBH", 0x82, 0x80 | 126, length)
    return header + mask + masked


async def ws_session(port: int, token: str, rng: random.Random, c: Counters) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET /v1/namespaces/{NS}/ws?token={token} HTTP/1.1\r\nHost: soak\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: {key}\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        c.fail(f"ws upgrade {head[:40]!r}")
        writer.close()
        return
    c.ws_sessions += 1
    rga_len: dict[str, int] = {}
    for _ in range(rng.randint(1, 4)):
        writer.write(ws_frame({"kind": "subscribe", "id": crdt_id(rng)}))
    deadline = time.monotonic() + rng.uniform(1, 6)
    ref = 0
    buffer = b""
    while time.monotonic() < deadline:
        if rng.random() < 0.5:
            ref += 1
            crdt = crdt_id(rng)
            writer.write(
                ws_frame(
                    {"kind": "op", "id": crdt, "op": random_op(rng, crdt, rga_len), "ref": ref}
                )
            )
        with contextlib.suppress(asyncio.TimeoutError):
            chunk = await asyncio.wait_for(reader.read(65536), 0.05)
            if not chunk:
                break
            buffer += chunk
            buffer, count = _count_frames(buffer)
            c.ws_messages += count
    if rng.random() < 0.5:
        writer.write(b"\x88\x82" + os.urandom(4)[:4] + b"\x00\x00")  # a close frame (masked code)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reader.read(65536), 1)
    writer.close()  # or just drop the connection


def _count_frames(buffer: bytes) -> tuple[bytes, int]:
    count = 0
    while len(buffer) >= 2:
        length = buffer[1] & 0x7F
        offset = 2
        if length == 126:
            if len(buffer) < 4:
                break
            (length,) = struct.unpack_from("!H", buffer, 2)
            offset = 4
        elif length == 127:
            if len(buffer) < 10:
                break
            (length,) = struct.unpack_from("!Q", buffer, 2)
            offset = 10
        if len(buffer) < offset + length:
            break
        buffer = buffer[offset + length :]
        count += 1
    return buffer, count


async def ws_worker(port: int, token: str, stop: asyncio.Event, c: Counters, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        try:
            await ws_session(port, token, rng, c)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            c.fail(f"ws {type(exc).__name__}: {exc}")
        await asyncio.sleep(rng.uniform(0, 0.5))


async def sse_worker(port: int, token: str, stop: asyncio.Event, c: Counters, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        crdt = crdt_id(rng)
        query = f"?since={rng.randrange(5)}&epoch=stale" if rng.random() < 0.3 else ""
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                f"GET /v1/namespaces/{NS}/crdts/{crdt}/events{query} HTTP/1.1\r\nHost: soak\r\n"
                f"Authorization: Bearer {token}\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                c.fail(f"sse {head[:40]!r}")
            c.sse_sessions += 1
            deadline = time.monotonic() + rng.uniform(1, 5)
            while time.monotonic() < deadline:
                with contextlib.suppress(asyncio.TimeoutError):
                    chunk = await asyncio.wait_for(reader.read(65536), 0.2)
                    if not chunk:
                        break
                    c.sse_events += chunk.count(b"data: ")
            writer.close()
        except (OSError, asyncio.IncompleteReadError) as exc:
            c.fail(f"sse {type(exc).__name__}: {exc}")
        await asyncio.sleep(rng.uniform(0, 0.3))


# --- sampling and the verdict ----------------------------------------------------


@dataclass
class Sample:
    t: float
    rss: int
    fds: int
    http: int
    ws: int
    sse: int


def flat(values: list[int], tolerance: float) -> tuple[bool, float, float]:
    quarter = max(1, len(values) // 4)
    early = statistics.median(values[:quarter])
    late = statistics.median(values[-quarter:])
    return late - early <= tolerance, early, late


def slope_per_min(samples: list[Sample], attr: str) -> float:
    if len(samples) < 2:
        return 0.0
    xs = [s.t / 60 for s in samples]
    ys = [getattr(s, attr) for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


async def soak(args: argparse.Namespace, pid: int, port: int) -> dict[str, Any]:
    c = Counters()
    token_body = {"client_id": 1, "rules": {"r": [{"p": "*"}], "w": [{"p": "*"}], "rl": 1_000_000}}
    setup = Http(port)
    _, answer = await setup.request("POST", f"/v1/namespaces/{NS}/tokens", token_body)
    setup.close()
    token = answer["token"]
    await asyncio.sleep(0.5)
    idle_fds_before = fd_count(pid)
    stop = asyncio.Event()
    tasks = [
        *(asyncio.create_task(http_worker(port, token, stop, c, i)) for i in range(args.http)),
        *(asyncio.create_task(ws_worker(port, token, stop, c, 100 + i)) for i in range(args.ws)),
        *(asyncio.create_task(sse_worker(port, token, stop, c, 200 + i)) for i in range(args.sse)),
    ]
    started = time.monotonic()
    duration = args.minutes * 60
    samples: list[Sample] = []
    while (elapsed := time.monotonic() - started) < duration:
        await asyncio.sleep(min(args.sample, max(0.0, duration - elapsed)))
        samples.append(
            Sample(
                time.monotonic() - started,
                rss_bytes(pid),
                fd_count(pid),
                c.http,
                c.ws_sessions,
                c.sse_sessions,
            )
        )
        if args.verbose:
            s = samples[-1]
            print(
                f"{s.t:7.1f}s  rss {s.rss / 2**20:7.1f} MiB  fds {s.fds:5d}  http {s.http}",
                flush=True,
            )
    stop.set()
    await asyncio.wait(tasks, timeout=15)
    await asyncio.sleep(2)  # the server notices the last hang-ups
    idle_fds_after = fd_count(pid)
    warm = args.warmup if args.warmup is not None else duration / 5
    measured = [s for s in samples if s.t >= warm] or samples
    rss_tol = max(RSS_TOLERANCE_BYTES, RSS_TOLERANCE_SHARE * measured[0].rss)
    rss_ok, rss_early, rss_late = flat([s.rss for s in measured], rss_tol)
    fd_ok, fd_early, fd_late = flat([s.fds for s in measured], FD_TOLERANCE)
    return {
        "minutes": args.minutes,
        "warmup_s": warm,
        "samples": samples,
        "counters": c,
        "rss": {
            "flat": rss_ok,
            "early_mib": round(rss_early / 2**20, 1),
            "late_mib": round(rss_late / 2**20, 1),
            "slope_mib_per_min": round(slope_per_min(measured, "rss") / 2**20, 2),
            "max_mib": round(max(s.rss for s in samples) / 2**20, 1),
        },
        "fds": {
            "flat": fd_ok,
            "early": fd_early,
            "late": fd_late,
            "slope_per_min": round(slope_per_min(measured, "fds"), 2),
            "idle_before": idle_fds_before,
            "idle_after": idle_fds_after,
            "idle_back": idle_fds_after <= idle_fds_before,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=None, help="seconds (default: a fifth)")
    parser.add_argument("--http", type=int, default=8, help="HTTP clients")
    parser.add_argument("--ws", type=int, default=16, help="WebSocket clients")
    parser.add_argument("--sse", type=int, default=8, help="SSE readers")
    parser.add_argument("--fsync", default="batch", choices=["batch", "always", "never"])
    parser.add_argument("--verbose", action="store_true", help="print every sample as it comes")
    args = parser.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="syncd-soak-")
    log_path = Path(tmp) / "server.log"
    proc, port = start_server(os.path.join(tmp, "data"), log_path, args.fsync)
    try:
        import uvloop

        result = uvloop.run(soak(args, proc.pid, port))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            exit_code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_code = proc.wait()
    log = log_path.read_text(errors="replace")
    shutil.rmtree(tmp, ignore_errors=True)
    samples: list[Sample] = result.pop("samples")
    c: Counters = result.pop("counters")
    step = max(1, len(samples) // 24)
    rows = [
        [f"{s.t:.0f}", f"{s.rss / 2**20:.1f}", s.fds, s.http, s.ws, s.sse]
        for s in samples[::step] + ([samples[-1]] if samples[-1] not in samples[::step] else [])
    ]
    print(table(rows, ["t (s)", "RSS (MiB)", "fds", "http reqs", "ws sessions", "sse sessions"]))
    result["load"] = {
        "http_requests": c.http,
        "http_refused_ops": c.refused,
        "http_unexpected": c.http_errors,
        "ws_sessions": c.ws_sessions,
        "ws_messages_received": c.ws_messages,
        "sse_sessions": c.sse_sessions,
        "sse_events": c.sse_events,
        "deletes": c.deletes,
        "client_failures": c.failures[:5],
    }
    result["server"] = {
        "exit_code": exit_code,
        "tracebacks": log.count("Traceback"),
        "error_lines": sum(" ERROR " in line for line in log.splitlines()),
    }
    ok = (
        result["rss"]["flat"]
        and result["fds"]["flat"]
        and result["fds"]["idle_back"]
        and exit_code == 0
        and result["server"]["tracebacks"] == 0
        and result["server"]["error_lines"] == 0
    )
    result["verdict"] = "flat" if ok else "NOT FLAT (or errors)"
    print(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
