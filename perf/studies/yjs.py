"""Yjs side by side: syncd against the reference Node servers, in one run.

Servers (each pinned to core 0, like the other peers): syncd (``python -m
syncd``, SERVICE_FSYNC=batch: every update is on disk before it is sent on)
through its y-websocket endpoint; ``@y/websocket-server`` and
``@hocuspocus/server`` with their defaults (in memory, nothing durable).

1. **A real editing trace** (tests/data/traces/sveltecomponent.json.gz, the
   first ``--patches`` patches, one Yjs update per patch, made with pycrdt)
   sent by one writer, open loop at ``--rate`` updates/s, to a document with
   100 and 1000 subscribed connections. The load is one Node process on core
   1 (perf/peers/yjs/load.mjs: raw y-protocols clients, one clock for writer
   and subscribers). Figures: updates/s sent, deliveries/s (updates received
   by all subscribers over the time from the first send to the last
   receipt), delivery latency p50/p99 (send of update k to its receipt), and
   whether every subscriber got every update. For syncd, the document the
   server holds is checked against the trace's text.
2. **Memory per idle connection**: ``--idle`` synced connections spread over
   100 documents; the server's RSS growth over the count.
3. **Disk per update** (syncd): the log's bytes per update, and the merged
   document a snapshot stores (``?format=crdt``) per update.
4. **A join storm**: ``--storm`` (150) fresh providers join a 4 MB document at
   once; each server's peak RSS and CPU, and whether every joiner got the
   exact document (:mod:`perf.studies.join_storm`, which also compares two
   checkouts of syncd).

Usage: python -m perf.studies.yjs [--patches 3000] [--rate 500] [--idle 10000]
       [--storm 150] [--servers syncd,y-websocket,hocuspocus] [--json OUT]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perf.lib.servers import (
    LOAD_CORE,
    ROOT,
    SERVER_CORE,
    bench_token,
    free_port,
    pinned,
    process,
    syncd,
)
from perf.lib.table import table

PEERS = ROOT / "perf" / "peers" / "yjs"
TRACE = ROOT / "tests" / "data" / "traces" / "sveltecomponent.json.gz"
NS = "bench"
SUBSCRIBERS = (100, 1000)
SERVERS = ("syncd", "y-websocket", "hocuspocus")
LOAD_TIMEOUT_S = 180


def ensure_node_modules() -> None:
    if not (PEERS / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--prefix", str(PEERS), "--no-audit", "--no-fund"], check=True)


def trace_updates(patches: int) -> tuple[list[str], str]:
    """One base64 Yjs update per patch of the trace, and the text they make."""
    from pycrdt import Doc, Text

    with gzip.open(TRACE, "rt") as f:
        data = json.load(f)
    doc: Doc[Any] = Doc(client_id=1)
    text = doc.get("content", type=Text)
    updates: list[str] = []
    doc.observe(lambda event: updates.append(base64.b64encode(event.update).decode()))
    if data.get("startContent"):
        text.insert(0, data["startContent"])
        updates.clear()  # the starting content is the document's, not the load's
    done = 0
    for txn in data["txns"]:
        for pos, delete, insert in txn["patches"]:
            if done == patches:
                return updates, str(text)
            with doc.transaction():
                if delete:
                    del text[pos : pos + delete]
                if insert:
                    text.insert(pos, insert)
            done += 1
    return updates, str(text)


@contextlib.contextmanager
def server(name: str, data_dir: str) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(port, pid, load config) of a running server."""
    if name == "syncd":
        env = {"SERVICE_FSYNC": "batch", "SERVICE_MAX_CONNECTIONS": "50000"}
        with syncd(env, data_dir) as (port, proc):
            token = bench_token(port, NS)
            base = f"ws://127.0.0.1:{port}/v1/namespaces/{NS}/yjs"
            yield port, proc.pid, {"protocol": "y-websocket", "url": base, "token": token}
        return
    script = (
        PEERS / "node_modules" / "@y" / "websocket-server" / "src" / "server.js"
        if name == "y-websocket"
        else PEERS / "hocuspocus-server.mjs"
    )
    port = free_port()
    env = {"HOST": "127.0.0.1", "PORT": str(port)}
    with process(["node", str(script)], port, env, SERVER_CORE) as proc:
        protocol = "hocuspocus" if name == "hocuspocus" else "y-websocket"
        yield port, proc.pid, {"protocol": protocol, "url": f"ws://127.0.0.1:{port}"}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def load(mode: str, config: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run(
        pinned(["node", str(PEERS / "load.mjs"), mode, json.dumps(config)], LOAD_CORE),
        capture_output=True,
        text=True,
        timeout=LOAD_TIMEOUT_S,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def read_text(port: int, token: str, room: str) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/namespaces/{NS}/crdts/{room}?root=content",
        headers={"authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.load(response)["value"])


def read_state_bytes(port: int, token: str, room: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/namespaces/{NS}/crdts/{room}?format=crdt",
        headers={"authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return len(base64.b64decode(json.load(response)["state"]["update"]))


def log_bytes(log_dir: Path) -> int:
    """The records in the log's segments: the log keeps a runway of zeros
    written ahead of its end (syncd/store/log.py), which is not data."""
    return sum(len(seg.read_bytes().rstrip(b"\0")) for seg in log_dir.glob("*.seg"))


def run_trace(
    name: str, updates_file: str, n: int, expected: str, args: Any
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="syncd-yjs-") as data_dir:
        for subscribers in SUBSCRIBERS:
            with server(name, data_dir) as (port, _pid, config):
                room = f"yd:trace{subscribers}" if name == "syncd" else f"trace{subscribers}"
                result = load(
                    "trace",
                    {
                        **config,
                        "room": room,
                        "subscribers": subscribers,
                        "updates": updates_file,
                        "rate": args.rate,
                    },
                )
                result["server"] = name
                if name == "syncd":
                    token = config["token"]
                    result["server_text_ok"] = read_text(port, token, room) == expected
                    if subscribers == SUBSCRIBERS[0]:
                        result["log_bytes_per_update"] = log_bytes(Path(data_dir) / "log") / n
                        result["merged_bytes_per_update"] = read_state_bytes(port, token, room) / n
                rows.append(result)
                print(
                    f"  {name:<12} {subscribers:>5} subscribers: sent {result['sent_per_s']:,.0f}/s, "
                    f"delivered {result['delivered_per_s']:,.0f}/s, p50 {result['p50_ms']:.1f} ms, "
                    f"p99 {result['p99_ms']:.1f} ms, complete {result['complete']}",
                    flush=True,
                )
    return rows


def run_idle(name: str, count: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="syncd-yjs-idle-") as data_dir,
        server(name, data_dir) as (_port, pid, config),
    ):
        room = "yd:idle" if name == "syncd" else "idle"
        before = rss_bytes(pid)
        cmd = pinned(
            [
                "node",
                str(PEERS / "load.mjs"),
                "idle",
                json.dumps({**config, "room": room, "subscribers": count, "rooms": 100}),
            ],
            LOAD_CORE,
        )
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            connected = int(json.loads(line)["connected"])
            time.sleep(2)  # let the server settle what the connects allocated
            after = rss_bytes(pid)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(60)
    per = (after - before) / connected
    print(f"  {name:<12} {connected} idle connections: {per / 1024:.1f} KiB each", flush=True)
    return {
        "server": name,
        "connections": connected,
        "rss_before": before,
        "rss_after": after,
        "bytes_per_connection": per,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--patches", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=500.0, help="updates/s, open loop")
    parser.add_argument("--idle", type=int, default=10000)
    parser.add_argument("--storm", type=int, default=150, help="joiners of a join storm (0: none)")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if not shutil.which("node"):
        sys.exit("perf.studies.yjs needs Node (node and npm on PATH)")
    ensure_node_modules()
    names = [s for s in args.servers.split(",") if s]
    updates, expected = trace_updates(args.patches)
    print(f"trace: {len(updates)} updates from {TRACE.name}, {args.rate:g} updates/s")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(updates, f)
        updates_file = f.name
    try:
        traces = [
            row
            for name in names
            for row in run_trace(name, updates_file, len(updates), expected, args)
        ]
    finally:
        Path(updates_file).unlink()
    idle = [run_idle(name, args.idle) for name in names] if args.idle else []
    storms: list[dict[str, Any]] = []
    if args.storm:
        from perf.studies import join_storm  # it imports this module's servers

        storms = join_storm.run(["yjs"], names, args.storm, 4_000_000, 1, ROOT, None)
    print()
    print(
        table(
            [
                [
                    r["server"],
                    r["subscribers"],
                    f"{r['sent_per_s']:,.0f}",
                    f"{r['delivered_per_s']:,.0f}",
                    f"{r['p50_ms']:.1f}",
                    f"{r['p99_ms']:.1f}",
                    "yes" if r["complete"] else f"no ({r['delivered']}/{r['expected']})",
                ]
                for r in traces
            ],
            [
                "server",
                "subscribers",
                "updates/s sent",
                "deliveries/s",
                "p50 ms",
                "p99 ms",
                "all delivered",
            ],
        )
    )
    for r in traces:
        if "log_bytes_per_update" in r:
            print(
                f"syncd disk: log {r['log_bytes_per_update']:.0f} bytes/update before compaction; "
                f"the merged document a snapshot stores: {r['merged_bytes_per_update']:.1f} bytes/update; "
                f"server text equals the trace's: {r['server_text_ok']}"
            )
    if idle:
        print(
            table(
                [
                    [i["server"], i["connections"], f"{i['bytes_per_connection'] / 1024:.1f}"]
                    for i in idle
                ],
                ["server", "idle connections", "KiB per connection"],
            )
        )
    if storms:
        join_storm.report(storms)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"trace": traces, "idle": idle, "storm": storms}, indent=2)
        )


if __name__ == "__main__":
    main()
