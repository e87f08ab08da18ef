"""Kill harness for the embedded store's history: random SIGKILLs under writers.

Each round starts ``python -m syncd`` on one data directory
(``SERVICE_FSYNC=batch``, a tiny ``SERVICE_MEMORY_BUDGET_MB`` so CRDTs leave
memory and are loaded again while ops are in flight), runs concurrent HTTP
writers on a few CRDTs (several writers per CRDT, so one log batch holds
runs of one CRDT's ops; large register values, so checkpoints come every
few ops), and kills the server with SIGKILL at a random moment (every
``--term-every``-th round it stops cleanly instead, which writes the key
directory's table: starts after later kills read it and the frames after it,
the path of test_hint_behind_compaction.py). After the
restart every CRDT must read (no 410), hold every acknowledged seq, and
rebuild its state at every seq retention promises (``?at=``, from
``latest - RETAINED_OPS`` on), and ``/history`` must list those ops.

A failure stops the run and keeps the data directory and the server logs.
Every server log line ``history of ... follows seq`` (the index started a
life at a gap while running: HistoryIndex.add_op) is counted and printed.

    python -m perf.studies.kill_history --rounds 200 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

ADMIN: Final = "kill-history-admin"
AUTH: Final = {"authorization": f"Bearer {ADMIN}"}
NS: Final = "kh"
RETAINED_OPS: Final = 200
"""SERVICE_HISTORY_RETENTION in ops: small, so retention trims and
compaction runs within a run, while the seqs checked stay promised."""


@dataclass
class Model:
    acked: dict[str, int] = field(default_factory=dict)
    """The highest seq acknowledged per CRDT."""
    writes: int = 0
    """Requests acknowledged, all rounds."""
    ended: dict[str, int] = field(default_factory=dict)
    """How writers' connections ended (the kill's errors), by error type."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(data: Path, log_path: Path, budget_mb: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(data),
        "SERVICE_SIGNING_KEY": "11" * 32,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_FSYNC": "batch",
        "SERVICE_MEMORY_BUDGET_MB": budget_mb,
        "SERVICE_HISTORY_RETENTION": f"{RETAINED_OPS}ops",
        "SERVICE_LOG_LEVEL": "INFO",
    }
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncd"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; see {log_path}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2) as s:
                s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return proc, port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError("server did not become ready")


def op_for(crdt: str, rng: random.Random) -> Any:
    if crdt.startswith("lw:"):
        return {"op": "set", "value": "v" * rng.randrange(500, 6000)}
    if crdt.startswith("or:"):
        return {"op": "add", "element": f"e{rng.randrange(10**9)}" * rng.randrange(1, 40)}
    return {"op": "increment"}


async def writer(url: str, crdts: list[str], model: Model, rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        while True:
            crdt = rng.choice(crdts)
            n = 1 if rng.random() < 0.7 else rng.randrange(2, 6)
            body = [op_for(crdt, rng) for _ in range(n)] if n > 1 else op_for(crdt, rng)
            try:
                r = await client.post(
                    f"/v1/namespaces/{NS}/crdts/{crdt}/ops", json=body, headers=AUTH
                )
            except httpx.HTTPError as exc:
                name = type(exc).__name__
                model.ended[name] = model.ended.get(name, 0) + 1
                return
            if r.status_code == 503:  # a clean stop under way
                model.ended["503"] = model.ended.get("503", 0) + 1
                return
            if r.status_code != 200:
                raise AssertionError(f"write {crdt}: {r.status_code} {r.text}")
            seq = r.json()["seq"]
            model.acked[crdt] = max(model.acked.get(crdt, 0), seq)
            model.writes += 1


async def check(url: str, model: Model, rng: random.Random) -> list[str]:
    problems: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for crdt, acked in sorted(model.acked.items()):
            base = f"/v1/namespaces/{NS}/crdts/{crdt}"
            r = await client.get(base, headers=AUTH)
            if r.status_code != 200:
                problems.append(f"{crdt}: read {r.status_code} {r.text}")
                continue
            latest = r.json()["seq"]
            if latest < acked:
                problems.append(f"{crdt}: seq {latest} < acknowledged {acked}")
            floor = max(0, latest - RETAINED_OPS)
            h = await client.get(f"{base}/history", params={"limit": 1000}, headers=AUTH)
            if h.status_code != 200:
                problems.append(f"{crdt}: history {h.status_code} {h.text}")
            else:
                page = h.json()
                if page["oldest"] > floor:
                    problems.append(f"{crdt}: history oldest {page['oldest']} > floor {floor}")
                listed = sorted(o["seq"] for o in page["ops"])
                want = list(range(page["oldest"] + 1, latest + 1))
                # One page: the newest ops, up to its limit.
                if listed != want[len(want) - len(listed) :]:
                    problems.append(
                        f"{crdt}: history lists {listed[:3]}..{listed[-3:]}, want {want[:3]}.."
                    )
            picks = {floor, latest, *(rng.randint(floor, latest) for _ in range(6))}
            for seq in sorted(picks):
                a = await client.get(base, params={"at": seq}, headers=AUTH)
                if a.status_code != 200:
                    problems.append(f"{crdt}: at={seq} (latest {latest}): {a.status_code} {a.text}")
    return problems


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kill-history-"))
    data = work / "data"
    crdts = [f"lw:r{i}" for i in range(args.crdts)] + [f"or:s{i}" for i in range(2)] + ["gc:c"]
    model = Model()
    gaps = 0
    started = time.monotonic()
    for round_no in range(args.rounds):
        log_path = work / f"round{round_no}.log"
        proc, port = spawn(data, log_path, args.budget_mb)
        url = f"http://127.0.0.1:{port}"
        problems = await check(url, model, rng)
        if not problems:
            tasks = [
                asyncio.create_task(writer(url, crdts, model, random.Random(rng.random())))
                for _ in range(args.writers)
            ]
            await asyncio.sleep(rng.uniform(0.3, args.max_s))
            # Now and then a clean stop: it writes the key directory's table,
            # which the starts after the next kills read (and the frames after it).
            clean = args.term_every > 0 and round_no % args.term_every == args.term_every - 1
            proc.send_signal(signal.SIGTERM if clean else signal.SIGKILL)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            problems = [repr(e) for e in results if isinstance(e, BaseException)]
        if proc.poll() is None and not problems:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                problems.append("a clean stop took over 30 s")
        proc.kill()
        proc.wait(10)
        text = log_path.read_text(errors="replace")
        found = [line for line in text.splitlines() if "follows seq" in line or "Traceback" in line]
        gaps += len(found)
        for line in found:
            print(f"round {round_no}: {line}", flush=True)
        if problems:
            print(f"round {round_no}: FAILED (seed {args.seed}); kept {work}", flush=True)
            for p in problems[:20]:
                print("  ", p, flush=True)
            return 1
        if round_no % 10 == 0:
            print(
                f"round {round_no}: ok, {model.writes} writes acknowledged, "
                f"seqs {sum(model.acked.values())}, writers ended by {model.ended} "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
        else:
            log_path.unlink()
    print(f"{args.rounds} rounds ok (seed {args.seed}), gap warnings {gaps}", flush=True)
    shutil.rmtree(work)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--crdts", type=int, default=4)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--budget-mb", default="0.05")
    parser.add_argument("--max-s", type=float, default=4.0)
    parser.add_argument(
        "--term-every", type=int, default=10, help="every Nth round ends in SIGTERM (0: never)"
    )
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
