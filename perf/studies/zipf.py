"""A zipf-distributed read/write load over many CRDTs, with a memory budget that
holds a fifth of them against one that holds them all.

A real server (subprocess, core 0) gets ``--crdts`` gcounters (one op each),
then is restarted twice on the same data: once with a budget that holds
about ``--share`` of them (from the engine's own estimate, read from
/metrics after loading every CRDT once), once with a budget that holds all.
Each run reads every CRDT once (warm-up), then ``--conns`` keep-alive
connections (core 1) send ``--seconds`` of requests whose CRDT is drawn from
a zipf distribution (exponent ``--s``), half reads and half increments. The
figure is requests per second; the runs alternate ``--rounds`` times.

Target (issue #30): with a fifth resident, >= 0.8x the throughput with all
resident.

Usage: python -m perf.studies.zipf [--crdts 100000] [--share 0.2] [--seconds 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import os
import random
import shutil
import tempfile
import time
import urllib.request
from typing import Any

from perf.lib.servers import ADMIN, LOAD_CORE, ROOT
from perf.studies.working_set import NS, Server, _request, write_all


def crdt_id(i: int) -> str:
    return f"gc:c{i}"


def zipf_sequence(n: int, s: float, count: int, seed: int) -> list[int]:
    """``count`` draws from a zipf(s) over 0..n-1 (rank 0 the most frequent),
    the ranks shuffled over the ids so hot CRDTs are spread over the key space."""
    rng = random.Random(seed)
    cumulative = list(itertools.accumulate(1.0 / (k**s) for k in range(1, n + 1)))
    total = cumulative[-1]
    ids = list(range(n))
    rng.shuffle(ids)
    return [ids[bisect.bisect_left(cumulative, rng.random() * total)] for _ in range(count)]


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


async def warm_up(port: int, crdts: int, conns: int) -> None:
    ids = iter(range(crdts))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in ids:
            head = (
                f"GET /v1/namespaces/{NS}/crdts/{crdt_id(i)} HTTP/1.1\r\nHost: b\r\n"
                f"Authorization: Bearer {ADMIN}\r\n\r\n"
            ).encode()
            status, answer = await _request(reader, writer, head, b"")
            if status != 200:
                raise RuntimeError(f"warm-up read of {crdt_id(i)}: {status} {answer[:300]!r}")
        writer.close()

    await asyncio.gather(*(worker() for _ in range(conns)))


async def load(port: int, draws: list[int], conns: int, seconds: float) -> float:
    """Requests per second for ``seconds`` (half reads, half increments)."""
    done = 0
    stop_at = time.perf_counter() + seconds
    position = itertools.count()
    body = b'{"op":"increment"}'

    async def worker() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.perf_counter() < stop_at:
            k = next(position)
            i = draws[k % len(draws)]
            if k % 2:
                head = (
                    f"GET /v1/namespaces/{NS}/crdts/{crdt_id(i)} HTTP/1.1\r\nHost: b\r\n"
                    f"Authorization: Bearer {ADMIN}\r\n\r\n"
                ).encode()
                payload = b""
            else:
                head = (
                    f"POST /v1/namespaces/{NS}/crdts/{crdt_id(i)}/ops HTTP/1.1\r\nHost: b\r\n"
                    f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                payload = body
            status, answer = await _request(reader, writer, head, payload)
            if status != 200:
                raise RuntimeError(f"{status} {answer[:200]!r}")
            done += 1
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conns)))
    return done / (time.perf_counter() - started)


def run_one(
    data_dir: str, budget_mb: float, crdts: int, draws: list[int], conns: int, seconds: float
) -> dict[str, Any]:
    server = Server(ROOT, data_dir, budget_mb)
    server.start()
    try:
        asyncio.run(warm_up(server.port, crdts, conns))
        rate = asyncio.run(load(server.port, draws, conns, seconds))
        return {
            "budget_mb": budget_mb,
            "requests_s": rate,
            "resident": metric(server.port, "service_engine_resident_crdts"),
            "loads": metric(server.port, "service_engine_loads_total"),
            "evictions": metric(server.port, "service_engine_evictions_total"),
            "rss_mb": server.rss,
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--crdts", type=int, default=100_000)
    parser.add_argument("--share", type=float, default=0.2)
    parser.add_argument("--s", type=float, default=1.0, help="zipf exponent")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--conns", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {int(LOAD_CORE)})
    base = tempfile.mkdtemp(prefix="syncd-zipf-")
    try:
        data_dir = os.path.join(base, "data")
        server = Server(ROOT, data_dir, 4096)
        server.start()
        try:
            asyncio.run(
                write_all(
                    server.port,
                    args.crdts,
                    args.conns,
                    ident=crdt_id,
                    make_body=lambda _: b'{"op":"increment"}',
                )
            )
            whole = metric(server.port, "service_engine_resident_bytes")
        finally:
            server.stop()
        small = whole * args.share / (1024 * 1024)
        large = whole * 4 / (1024 * 1024)
        print(
            f"{args.crdts:,} CRDTs take {whole / 1e6:.1f} MB (estimated); budgets "
            f"{small:.1f} MB ({args.share:.0%}) and {large:.1f} MB (all)",
            flush=True,
        )
        draws = zipf_sequence(args.crdts, args.s, 200_000, seed=1)
        figures: dict[str, list[float]] = {"share": [], "all": []}
        for _ in range(args.rounds):
            for name, budget in (("all", large), ("share", small)):
                r = run_one(data_dir, budget, args.crdts, draws, args.conns, args.seconds)
                figures[name].append(r["requests_s"])
                print(
                    f"  {name}: {r['requests_s']:,.0f} requests/s, {r['resident']:,.0f} resident, "
                    f"{r['loads']:,.0f} loads, {r['evictions']:,.0f} evictions, "
                    f"RSS {r['rss_mb']:.0f} MB",
                    flush=True,
                )
        ratio = max(figures["share"]) / max(figures["all"])
        print(
            f"zipf s={args.s}: {args.share:.0%} resident / all resident = {ratio:.2f}x (target >= 0.8x)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
