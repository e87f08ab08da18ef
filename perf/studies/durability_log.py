"""The embedded log store on its own: group commit throughput, bytes per record,
recovery time with and without a snapshot.

* appends/s from ``--writers`` concurrent writers (each awaits its append, then
  makes the next), with ``fsync=batch`` (group commit) and ``fsync=never`` in the
  same run, and their ratio: what durability costs once commits are grouped
  (``fsync=always`` alongside, to show what grouping saves). With closed-loop
  writers a batch holds at most one append per writer, so batch throughput is
  about ``writers / fsync latency``;
* the same for ``batch`` and ``always`` with the log's runway of zeros off, and
  the gain with it: what writing into blocks already written saves;
* bytes on disk per small op record (frame header + msgpack body);
* start-up time (``open()``: read, check, decode, rebuild the replay tail) for
  ``--records`` records over ``--crdts`` CRDTs, first with the whole history in
  the log, then after a snapshot.

    .venv/bin/python -m perf.studies.durability_log [--seconds 3] [--records 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from typing import Any

import uvloop

from syncd.store.embedded.store import FileStore


def record(crdt: int, seq: int) -> dict[str, Any]:
    """A small op record as the engine makes it (a gcounter increment)."""
    return {
        "kind": "op",
        "ns": "bench",
        "id": f"gc:c{crdt}",
        "type": "gcounter",
        "seq": seq,
        "epoch": "3f9a1c07d2b4e6a8",
        "client_id": 1000 + crdt % 50,
        "ts": 1_760_000_000_000 + seq,
        "op": {"op": "increment", "amount": 1},
        "op_id": None,
    }


async def throughput(
    data_dir: str, mode: str, writers: int, seconds: float, runway: bool = True
) -> dict[str, float]:
    store = FileStore(data_dir, fsync=mode, log_runway=runway)
    await store.open()
    stop = time.perf_counter() + seconds
    done = 0

    async def writer(w: int) -> None:
        nonlocal done
        seq = 0
        while time.perf_counter() < stop:
            seq += 1
            await store.append([record(w, seq)])
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    elapsed = time.perf_counter() - start
    stats = store.stats
    await store.close()
    return {
        "appends_per_s": done / elapsed,
        "fsyncs_per_s": stats.fsyncs / elapsed,
        "records_per_batch": stats.records_written / max(stats.batches, 1),
        "bytes_per_record": stats.bytes_written / max(stats.records_written, 1),
    }


async def fill(data_dir: str, records: int, crdts: int) -> float:
    """Write the history fast (fsync=never, large append calls); seconds taken."""
    store = FileStore(data_dir, fsync="never", snapshot_every_bytes=1 << 62)
    await store.open()
    start = time.perf_counter()
    seqs = [0] * crdts
    chunk = []
    for i in range(records):
        c = i % crdts
        seqs[c] += 1
        chunk.append(record(c, seqs[c]))
        if len(chunk) == 1000:
            await store.append(chunk)
            chunk = []
    if chunk:
        await store.append(chunk)
    await store.close()
    return time.perf_counter() - start


async def timed_open(data_dir: str) -> tuple[float, int, int, int]:
    store = FileStore(data_dir)
    start = time.perf_counter()
    recovered = await store.open()
    elapsed = time.perf_counter() - start
    read = store.stats.recovery_bytes_read
    await store.close()
    return elapsed, len(recovered.entries), len(recovered.records), read


async def snapshot(data_dir: str, crdts: int, per_crdt: int) -> tuple[float, int]:
    store = FileStore(data_dir)
    await store.open()
    entries = [
        {
            "ns": "bench",
            "id": f"gc:c{c}",
            "type": "gcounter",
            "seq": per_crdt,
            "epoch": "3f9a1c07d2b4e6a8",
            "state": {str(1000 + c % 50): per_crdt},
            "op_ids": [],
        }
        for c in range(crdts)
    ]
    store.set_snapshot_source(lambda: entries)
    start = time.perf_counter()
    await store.compact_now()
    elapsed = time.perf_counter() - start
    await store.close()
    size = sum(
        os.path.getsize(os.path.join(data_dir, "snapshots", n))
        for n in os.listdir(os.path.join(data_dir, "snapshots"))
    )
    return elapsed, size


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--crdts", type=int, default=10_000)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="syncd-bench-", dir=args.dir)
    try:
        print(f"data in {base}")
        results = {}
        for mode in ("batch", "never", "always"):
            results[mode] = await throughput(
                os.path.join(base, f"tp-{mode}"), mode, args.writers, args.seconds
            )
            r = results[mode]
            print(
                f"fsync={mode:6s} {args.writers} writers: {r['appends_per_s']:9.0f} appends/s, "
                f"{r['fsyncs_per_s']:6.0f} fsyncs/s, {r['records_per_batch']:6.1f} records/batch"
            )
        for mode in ("batch", "always"):
            # The same with the log's runway off (syncd.store.log.RUNWAY_BYTES):
            # every durable write then extends the file.
            r = await throughput(
                os.path.join(base, f"tp-{mode}-norunway"), mode, args.writers, args.seconds, False
            )
            print(
                f"fsync={mode:6s} {args.writers} writers, no runway: {r['appends_per_s']:9.0f}"
                f" appends/s ({results[mode]['appends_per_s'] / r['appends_per_s']:.2f}x with it)"
            )
        ratio = results["batch"]["appends_per_s"] / results["never"]["appends_per_s"]
        gain = results["batch"]["appends_per_s"] / results["always"]["appends_per_s"]
        print(f"batch/never throughput ratio: {ratio:.2f} (group commit vs always: x{gain:.1f})")
        print(f"bytes per small op record: {results['batch']['bytes_per_record']:.1f}")

        history = os.path.join(base, "history")
        took = await fill(history, args.records, args.crdts)
        log_bytes = sum(
            os.path.getsize(os.path.join(history, "log", n))
            for n in os.listdir(os.path.join(history, "log"))
        )
        print(
            f"wrote {args.records} records over {args.crdts} CRDTs in {took:.1f} s "
            f"({log_bytes / 1e6:.1f} MB of log)"
        )
        elapsed, entries, records, read = await timed_open(history)
        print(
            f"recovery without snapshot: {elapsed:.2f} s "
            f"({records} records replayed, {read / 1e6:.1f} MB read)"
        )
        snap_s, snap_size = await snapshot(history, args.crdts, args.records // args.crdts)
        print(f"snapshot of {args.crdts} entries: {snap_s:.2f} s, {snap_size / 1e6:.2f} MB")
        elapsed, entries, records, read = await timed_open(history)
        print(
            f"recovery with snapshot:    {elapsed:.2f} s "
            f"({entries} entries, {records} records replayed, {read / 1e6:.1f} MB read)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    uvloop.run(main())
