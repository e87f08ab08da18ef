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

Usage: python -m perf.bench.ws_fanout [--subscribers N] [--rate DELTAS_PER_S]
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

from perf.lib.proc import cpu_seconds
from perf.lib.servers import LOAD_CORE, ROOT, bench_token, pinned, syncd
from perf.suite.registry import TARGETS

NS = "bench"
CRDT = "lw:fanout"
TARGET_DELIVERIES = TARGETS["ws-fanout.deliveries"]
TARGET_P99 = TARGETS["ws-fanout.p99"]
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
    port: int,
    path: str,
    count: int,
    on_frame: Callable[[int, bytes, float], None],
    cls: type[RawWs] = RawWs,
) -> list[RawWs]:
    loop = asyncio.get_running_loop()
    clients: list[RawWs] = []
    for start in range(0, count, CONNECT_BATCH):
        batch = [cls(path, on_frame) for _ in range(min(CONNECT_BATCH, count - start))]
        await asyncio.gather(
            *(loop.create_connection(_factory(c), "127.0.0.1", port) for c in batch)
        )
        await asyncio.gather(*(c.ready for c in batch))
        clients += batch
    return clients


def run_queue_wait_seconds(pid: int) -> float:
    """Time the process's main thread was ready to run but waiting for its core
    (/proc/PID/schedstat): the share of the run other work on that core took
    from it. On the shared benchmark VM this is often the largest term of a
    tail latency, and none of the server's doing."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


# --- the subscriber process ------------------------------------------------


class _Chunks:
    """What the subscribers have seen, shared by all of them in the process."""

    def __init__(self) -> None:
        self.sent_at: dict[bytes, float] = {}
        """Delta frame payload -> the writer's send time."""
        self.times: dict[bytes, tuple[float, ...]] = {}
        """A whole read (complete delta frames only) -> its deltas' send times."""
        self.received: list[tuple[float, tuple[float, ...]]] = []
        """(receive time, send times of the deltas read) while measuring."""
        self.frame_times: list[float] | None = None
        """Send times of the op frames of the read being parsed."""
        self.cacheable = True
        """Whether that read held op frames only."""
        self.measuring = False
        self.snapshots = 0
        self.resyncs = 0


class _Subscriber(RawWs):
    """Every subscriber is sent the same bytes per server flush, so a whole read
    is looked up once instead of being parsed frame by frame: parsing and
    accounting 320k frames/s would cost this process most of a core, and the
    time it took for the 1000th socket of a burst would show up as delivery
    latency that is the load generator's own queueing. The receive time is
    taken on entry either way, as before."""

    chunks: _Chunks

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        chunks = self.chunks
        if self.upgraded and not self.buf:
            times = chunks.times.get(data)
            if times is not None:
                if chunks.measuring:
                    chunks.received.append((now, times))
                return
            frame_times: list[float] = []
            chunks.frame_times = frame_times
            chunks.cacheable = True
            super().data_received(data)
            chunks.frame_times = None
            times = tuple(frame_times)
            if chunks.cacheable and not self.buf:
                chunks.times[data] = times
            if chunks.measuring and times:
                chunks.received.append((now, times))
            return
        super().data_received(data)


async def subscribers_main(
    port: int, token: str, count: int, warmup: float, duration: float
) -> None:
    chunks = _Chunks()
    _Subscriber.chunks = chunks
    sent_at = chunks.sent_at

    def on_frame(opcode: int, payload: bytes, now: float) -> None:
        t = sent_at.get(payload)
        if t is None:
            delta = msgpack.unpackb(payload)
            kind = delta.get("kind")
            if kind == "synced":
                return  # the end of a subscription's start: no delta
            if kind != "op":
                chunks.snapshots += 1
                if chunks.snapshots > count:
                    chunks.resyncs += 1
                chunks.cacheable = False
                return
            t = sent_at[payload] = delta["op"]["value"]
        frame_times = chunks.frame_times
        if frame_times is not None:
            frame_times.append(t)
        elif chunks.measuring:
            # The tail of a read split mid-frame: counted on its own.
            chunks.received.append((now, (t,)))

    clients = await open_clients(
        port, f"/v1/namespaces/{NS}/ws?token={token}", count, on_frame, _Subscriber
    )
    subscribe = message({"kind": "subscribe", "id": CRDT})
    for c in clients:
        c.send(subscribe)
    while chunks.snapshots < count:
        await asyncio.sleep(0.01)
    print("READY", flush=True)
    await asyncio.sleep(warmup)
    sent_at.clear()
    chunks.times.clear()
    chunks.measuring = True
    started = time.monotonic()
    cpu_started = time.process_time()
    wait_started = run_queue_wait_seconds(os.getpid())
    await asyncio.sleep(duration)
    chunks.measuring = False
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu_started
    latencies = sorted(now - t for now, times in chunks.received for t in times)
    n = len(latencies)
    result = {
        "deliveries": n,
        "deliveries_per_s": n / elapsed,
        "p50_ms": latencies[n // 2] * 1000 if n else None,
        "p99_ms": latencies[int(n * 0.99)] * 1000 if n else None,
        "max_ms": latencies[-1] * 1000 if n else None,
        "resyncs": chunks.resyncs,
        "subscriber_cpu": cpu / elapsed,
        "subscriber_run_queue_wait": (run_queue_wait_seconds(os.getpid()) - wait_started) / elapsed,
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
                    "perf.bench.ws_fanout",
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
        cpu_before = cpu_seconds(proc.pid)
        wait_before = run_queue_wait_seconds(proc.pid)
        writer = uvloop.run(writer_main(port, token, rate, warmup + duration + 0.5))
        cpu = cpu_seconds(proc.pid) - cpu_before
        wait = run_queue_wait_seconds(proc.pid) - wait_before
        out, _ = child.communicate(timeout=60)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        result["writer"] = writer
        result["server_cpu"] = cpu / (warmup + duration + 0.5)
        result["server_run_queue_wait"] = wait / (warmup + duration + 0.5)
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
    print(f"  deliveries/s {r['deliveries_per_s']:,.0f}  (target {TARGET_DELIVERIES})")
    print(
        f"  latency p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.1f} ms"
        f"  (target p99 {TARGET_P99})"
    )
    print(
        f"  resyncs {r['resyncs']}  CPU: server {r['server_cpu']:.0%}, "
        f"subscribers {r['subscriber_cpu']:.0%} of a core"
    )
    print(
        f"  waiting for a busy core (other work on it): server {r['server_run_queue_wait']:.0%}, "
        f"subscribers {r['subscriber_run_queue_wait']:.0%} of the time"
    )
    print(f"  writer {r['writer']}")


if __name__ == "__main__":
    main()
