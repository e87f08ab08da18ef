"""WebSocket fan-out: one writer, many subscribers on one CRDT.

The server runs as a subprocess (SERVICE_FSYNC=batch) pinned to core 0. The
subscribers live in another process pinned to core 1: raw uvloop protocols
that parse frame headers by hand and decode each distinct delta once (every
subscriber receives the same bytes). The writer, in this process, sends
``lwwregister`` sets open-loop at a fixed rate, each carrying its send time
(``time.monotonic()``, one clock for all processes on Linux), so a subscriber
knows each delivery's latency.

Figures: deliveries/s (frames received by all subscribers in the measured
window), p50/p99 delivery latency, resyncs (snapshots after the first: a
subscriber fell behind), and the server's CPU use. Targets: >= 300k
deliveries/s, p99 <= 50 ms.

The raw client here (:class:`RawWs`) is shared by the other ws benchmarks.

Usage: python -m perf.ws_fanout [--subscribers N] [--rate DELTAS_PER_S]
       [--duration S] [--warmup S]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import msgpack
import uvloop

from perf.common import LOAD_CORE, ROOT, bench_token, pinned, syncd

NS = "bench"
CRDT = "lw:fanout"
TARGET_DELIVERIES = 300_000
TARGET_P99_MS = 50.0
CONNECT_BATCH = 200
"""Connections opened at once: well under the server's listen backlog."""
TICK_S = 0.005
"""The writer sends what is due every tick, as one batch of ops."""


def client_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """A masked client frame with an all-zero key: legal, and the payload stays as is."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


def message(obj: dict[str, Any]) -> bytes:
    return client_frame(msgpack.packb(obj))


class RawWs(asyncio.Protocol):
    """A minimal WebSocket client: handshake, then ``on_frame(opcode, payload, now)``."""

    def __init__(self, path: str, on_frame: Callable[[int, bytes, float], None]) -> None:
        self.path = path
        self.on_frame = on_frame
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buf = b""
        self.upgraded = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = transport = cast(asyncio.Transport, transport)
        key = base64.b64encode(os.urandom(16))
        transport.write(
            b"GET " + self.path.encode() + b" HTTP/1.1\r\nHost: b\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
            + key
            + b"\r\n\r\n"
        )

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            if not buf.startswith(b"HTTP/1.1 101"):
                if not self.ready.done():
                    self.ready.set_exception(RuntimeError(buf[:200].decode("latin-1")))
                return
            self.upgraded = True
            buf = buf[end + 4 :]
            self.ready.set_result(None)
        now = time.monotonic()
        pos, n = 0, len(buf)
        on_frame = self.on_frame
        while n - pos >= 2:
            length = buf[pos + 1] & 0x7F
            head = 2
            if length == 126:
                if n - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                head = 4
            elif length == 127:
                if n - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            end = pos + head + length
            if end > n:
                break
            on_frame(buf[pos] & 0x0F, buf[pos + head : end], now)
            pos = end
        self.buf = buf[pos:] if pos < n else b""

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("connection lost before the upgrade"))

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


def _factory(client: RawWs) -> Callable[[], RawWs]:
    return lambda: client


async def open_clients(
    port: int, path: str, count: int, on_frame: Callable[[int, bytes, float], None]
) -> list[RawWs]:
    loop = asyncio.get_running_loop()
    clients: list[RawWs] = []
    for start in range(0, count, CONNECT_BATCH):
        batch = [RawWs(path, on_frame) for _ in range(min(CONNECT_BATCH, count - start))]
        await asyncio.gather(
            *(loop.create_connection(_factory(c), "127.0.0.1", port) for c in batch)
        )
        await asyncio.gather(*(c.ready for c in batch))
        clients += batch
    return clients


def server_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the subscriber process ------------------------------------------------


async def subscribers_main(
    port: int, token: str, count: int, warmup: float, duration: float
) -> None:
    sent_at: dict[bytes, float] = {}
    latencies: list[float] = []
    state = {"frames": 0, "resyncs": 0, "snapshots": 0, "measuring": False}

    def on_frame(opcode: int, payload: bytes, now: float) -> None:
        t = sent_at.get(payload)
        if t is None:
            delta = msgpack.unpackb(payload)
            if delta.get("kind") != "op":
                state["snapshots"] += 1
                if state["snapshots"] > count:
                    state["resyncs"] += 1
                return
            t = sent_at[payload] = delta["op"]["value"]
        if state["measuring"]:
            state["frames"] += 1
            latencies.append(now - t)

    clients = await open_clients(port, f"/v1/namespaces/{NS}/ws?token={token}", count, on_frame)
    subscribe = message({"kind": "subscribe", "id": CRDT})
    for c in clients:
        c.send(subscribe)
    while state["snapshots"] < count:
        await asyncio.sleep(0.01)
    print("READY", flush=True)
    await asyncio.sleep(warmup)
    sent_at.clear()
    state["measuring"] = True
    started = time.monotonic()
    cpu_started = time.process_time()
    await asyncio.sleep(duration)
    state["measuring"] = False
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu_started
    latencies.sort()
    n = len(latencies)
    result = {
        "deliveries": state["frames"],
        "deliveries_per_s": state["frames"] / elapsed,
        "p50_ms": latencies[n // 2] * 1000 if n else None,
        "p99_ms": latencies[int(n * 0.99)] * 1000 if n else None,
        "max_ms": latencies[-1] * 1000 if n else None,
        "resyncs": state["resyncs"],
        "subscriber_cpu": cpu / elapsed,
    }
    print(json.dumps(result), flush=True)


# --- the writer and the driver ---------------------------------------------


async def writer_main(port: int, token: str, rate: float, seconds: float) -> dict[str, Any]:
    acks = {"n": 0, "errors": 0}

    def on_frame(opcode: int, payload: bytes, now: float) -> None:
        answer = msgpack.unpackb(payload)
        if answer.get("kind") == "ack":
            acks["n"] += 1
        elif answer.get("kind") == "error":
            acks["errors"] += 1
            print("writer error:", answer, file=sys.stderr)

    (writer,) = await open_clients(port, f"/v1/namespaces/{NS}/ws?token={token}", 1, on_frame)
    started = time.monotonic()
    sent = 0
    ref = 0
    while (now := time.monotonic()) - started < seconds:
        due = int((now - started) * rate) - sent
        if due > 0:
            ref += 1
            ops = [{"op": "set", "value": now} for _ in range(due)]
            writer.send(message({"kind": "op", "id": CRDT, "op": ops, "ref": ref}))
            sent += due
        await asyncio.sleep(TICK_S)
    return {"sent": sent, "acked_messages": acks["n"], "errors": acks["errors"]}


def run(subscribers: int, rate: float, duration: float, warmup: float) -> dict[str, Any]:
    env = {
        "SERVICE_FSYNC": os.environ.get("BENCH_FSYNC", "batch"),
        "SERVICE_MAX_CONNECTIONS": str(subscribers + 100),
    }
    with syncd(env) as (port, proc):
        token = bench_token(port, NS)
        child = subprocess.Popen(
            pinned(
                [
                    sys.executable,
                    "-m",
                    "perf.ws_fanout",
                    "--subscriber-process",
                    str(port),
                    token,
                    str(subscribers),
                    str(warmup),
                    str(duration),
                ],
                LOAD_CORE,
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"subscribers failed: {line!r}")
        cpu_before = server_cpu_seconds(proc.pid)
        writer = uvloop.run(writer_main(port, token, rate, warmup + duration + 0.5))
        cpu = server_cpu_seconds(proc.pid) - cpu_before
        out, _ = child.communicate(timeout=60)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        result["writer"] = writer
        result["server_cpu"] = cpu / (warmup + duration + 0.5)
        return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--subscriber-process":
        port, token, count, warmup, duration = sys.argv[2:7]
        uvloop.run(subscribers_main(int(port), token, int(count), float(warmup), float(duration)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=320.0, help="deltas per second")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})  # the writer stays off the server's core
    r = run(args.subscribers, args.rate, args.duration, args.warmup)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**r, "subscribers": args.subscribers, "rate": args.rate}, f, indent=2)
    print(
        f"ws fan-out: {args.subscribers} subscribers, {args.rate:.0f} deltas/s offered "
        f"({args.rate * args.subscribers:,.0f} deliveries/s)"
    )
    print(f"  deliveries/s {r['deliveries_per_s']:,.0f}  (target >= {TARGET_DELIVERIES:,})")
    print(
        f"  latency p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.1f} ms"
        f"  (target p99 <= {TARGET_P99_MS:.0f} ms)"
    )
    print(
        f"  resyncs {r['resyncs']}  CPU: server {r['server_cpu']:.0%}, "
        f"subscribers {r['subscriber_cpu']:.0%} of a core"
    )
    print(f"  writer {r['writer']}")


if __name__ == "__main__":
    main()
