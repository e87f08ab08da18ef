"""CPU a cluster node spends on another node's op: the replay share ``r``, in-process.

Issue #35 point 1 asks that a record another node committed cost a small
fraction of a local op. ``perf.studies.cluster_scaling`` measures that share
with every process in a CPU budget, which a busy machine makes noisy. This
study measures the follower's side alone, in one process: a real node (App on
a throw-away PostgreSQL, ``perf.lib.postgres``) holds ``--crdts`` gcounters,
and the notifications another node would send for ``--records`` increments
spread over them (the payloads ``syncd.cluster.notify`` packs, as many records
a payload as one commit of ``--per-commit`` ops carries) are handed to its
replicator, as its listener does. The figure is the process's CPU time over
the handling divided by the records: microseconds of CPU per remote op, with
nobody subscribed (the cluster study's load) and with a subscriber on every
CRDT (``--subscribed``: each record is also fanned out).

Compare checkouts by running it with each on ``PYTHONPATH`` (alternate, take
medians); ``--repeat`` runs the handling several times on fresh records.

Usage: python -m perf.studies.replay_cpu [--crdts 64] [--records 20000]
       [--per-commit 16] [--repeat 5] [--subscribed]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import psycopg
import uvloop

from perf.lib.postgres import postgres_server
from syncd.app import App
from syncd.auth.authenticator import ROOT
from syncd.cluster.notify import pack_records
from syncd.config import Settings
from syncd.hub import DeliverEach, EncodedDelta

NS = "replay"
SENDER = "other.000000"
"""The sender tag of the notifications: not the node's own (those are dropped)."""


SETTLE_S = 0.2
"""A pause for what runs after a request's answer (the batch letting go of its
CRDTs) and after the handling (fan-out), outside the measured time."""


class Quiet(DeliverEach):
    """A subscriber that takes deltas and keeps none."""

    def deliver(self, delta: EncodedDelta) -> None:
        pass


def payloads_for(
    templates: dict[str, dict[str, Any]], seqs: dict[str, int], records: int, per_commit: int
) -> list[str]:
    """Notifications carrying ``records`` increments round-robin over the
    CRDTs, each after the seq the node holds, ``per_commit`` records a commit."""
    ids = list(templates)
    packed: list[bytes] = []
    for n in range(records):
        crdt_id = ids[n % len(ids)]
        seqs[crdt_id] += 1
        record = {**templates[crdt_id], "seq": seqs[crdt_id]}
        packed.append(msgpack.packb(record, use_bin_type=True))
    out: list[str] = []
    for start in range(0, len(packed), per_commit):
        chunk, too_large = pack_records(SENDER, packed[start : start + per_commit])
        assert not too_large
        out += chunk
    return out


async def measure(url: str, args: argparse.Namespace) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="syncd-replay-") as tmp:
        settings = Settings(
            host="127.0.0.1",
            port=0,
            data_dir=Path(tmp),
            signing_key=b"\x01" * 32,
            admin_token="x" * 20,
            fsync="never",
            database_url=url,
            node_id="follower",
        )  # type: ignore[call-arg]
        app = App(settings)
        await app.start()
        try:
            cluster = app.cluster
            assert cluster is not None
            templates: dict[str, dict[str, Any]] = {}
            seqs: dict[str, int] = {}
            for i in range(args.crdts):
                crdt_id = f"gc:{i}"
                result = await app.service.apply_ops(NS, crdt_id, {"op": "increment"}, ROOT, "http")
                record = dict(result.records[0])
                templates[crdt_id], seqs[crdt_id] = record, record["seq"]
                if args.subscribed:
                    app.hub.subscribe(NS, crdt_id, Quiet())
            await asyncio.sleep(SETTLE_S)  # the creating batches let go of their CRDTs
            figures = []
            for _ in range(args.repeat):
                payloads = payloads_for(templates, seqs, args.records, args.per_commit)
                gc.collect()
                started = time.process_time()
                for payload in payloads:
                    cluster._on_notify(payload)
                elapsed = time.process_time() - started
                await asyncio.sleep(SETTLE_S)  # what the handling queued (fan-out) runs
                held = {crdt_id: app.engine.get(NS, crdt_id) for crdt_id in seqs}
                behind = {
                    crdt_id: (entry.seq if entry else None, seq)
                    for crdt_id, seq in seqs.items()
                    if (entry := held[crdt_id]) is None or entry.seq != seq
                }
                if behind:
                    raise RuntimeError(f"records not applied: {behind}")
                figures.append(elapsed / args.records * 1e6)
            return figures
        finally:
            await app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--crdts", type=int, default=64)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--per-commit", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--subscribed", action="store_true", help="a subscriber on every CRDT")
    parser.add_argument("--pg", help="an existing PostgreSQL URL (default: a throw-away one)")
    args = parser.parse_args(argv)
    with postgres_server(args.pg) as server:
        name = "syncd_replay"
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        try:
            figures = uvloop.run(measure(f"{server}/{name}", args))
        finally:
            with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    runs = ", ".join(f"{f:.2f}" for f in figures)
    print(
        f"CPU per remote op: median {statistics.median(figures):.2f} us"
        f" ({args.records:,} records over {args.crdts} CRDTs, {args.per_commit} a commit,"
        f" {'a subscriber on each' if args.subscribed else 'no subscribers'}; runs: {runs})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
