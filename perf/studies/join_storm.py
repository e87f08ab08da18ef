"""Join storms: many fresh peers join one large document at once. How much
memory and CPU does the server spend, and does every joiner get the exact
document? (issue #35 point 3)

One document of about ``--doc-bytes`` (4 MB: its whole-document update; a
text edited by ~4,000 inserts at random places and some deletes, made with
pycrdt from a fixed seed) is seeded into the server by one writer through
y-websocket (who stays connected, as the author's editor would); a probe
joins until the document it is sent decodes to the expected text. Then,
measured:

1. the server's RSS (``RSS before``), its CPU time, and its peak RSS reset to
   now (``/proc/PID/clear_refs``: VmHWM starts again from the current RSS);
2. ``--joiners`` (150) connections open at once from one Node process on the
   load core (perf/peers/yjs/join.mjs: raw y-protocols clients doing what a
   fresh provider does: a step 1 with an empty state vector, an empty step 2
   to the server's step 1), and wait for the server's step 2. With
   ``--hold-ms``, each reads nothing for that long after its step 1, as peers
   on slow links do: what their sockets cannot take stays with the server
   meanwhile;
3. once the last joiner has its step 2: the server's CPU time again and its
   peak RSS (VmHWM). Each joiner's payloads (the step 2 and any update that
   follows it within ``settle_ms``) are then checked: grouped by hash, one of
   each group decoded with Yjs and compared with the expected text.

Figures per server: joiners synced and exact, peak RSS, RSS before, peak
growth, server CPU seconds for the storm, seconds until the last joiner had
its step 2. Target (issue #35): syncd's peak <= 160 MB, its CPU no worse than
before the change, every joiner synced.

``--kinds`` (default ``yjs``) adds the same storm for syncd's native
WebSocket (``ws``: ``subscribe``) and SSE (``sse``: ``GET .../events``) to an
rga of ``--doc-bytes`` characters (its msgpack snapshot about as many bytes;
~400 inserts of 10,000 characters at random places, over HTTP), each client
started with nothing so it is sent
the snapshot (:mod:`perf.lib.join_clients`, one Python process on the load
core; exact: the snapshot's seq and state equal the CRDT's ``?format=crdt``
read taken before the storm). The Node peers have no such protocols.

Where the state goes while a peer has not read it: into the kernel's send
buffer of its socket first, which Linux grows up to ``net.ipv4.tcp_wmem``'s
maximum (4 MiB by default) as the connection's window allows, and what does
not fit stays with the server. On loopback every socket's buffer grows to the
maximum, so a 4 MB state goes to the kernel almost whole and the server's own
memory hardly shows it; a peer across a slow or distant link lets it grow to
its bandwidth-delay product (hundreds of KB). ``--sndbuf-max BYTES`` models
that: the study runs itself, the servers and the load in a network namespace
of their own (``unshare -n``, as root) whose ``tcp_wmem`` maximum is BYTES,
leaving the machine's as it is.

Servers, each pinned to core 0: syncd from this checkout (``after``) and, with
``--compare DIR``, from another checkout (``before``: ``git worktree add
../before <commit>``), alternated round by round; ``@y/websocket-server`` and
``@hocuspocus/server`` (``--servers``) as in perf.studies.yjs, with their
defaults (in memory).

Usage: python -m perf.studies.join_storm [--joiners 150] [--doc-bytes 4000000]
       [--hold-ms 0] [--sndbuf-max BYTES] [--rounds 2] [--compare ../before]
       [--servers syncd,y-websocket,hocuspocus] [--kinds yjs,ws,sse] [--json out.json]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgpack

from perf.lib.checkouts import compile_syncd
from perf.lib.proc import cpu_seconds
from perf.lib.servers import LOAD_CORE, ROOT, bench_token, pinned
from perf.lib.table import table
from perf.studies import idle_connections, yjs

NS: Final = "bench"
ROOM: Final = "yd:storm"
"""A y-websocket room of syncd's is the document's id (``yd:``: a Yjs document)."""
SEED: Final = 35
WORDS: Final = (
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
)
INSERT_WORDS: Final = 150
"""Words per insert: about 1 KB, a pasted paragraph."""
DELETE_SHARE: Final = 0.3
"""Of the inserts, the share followed by a delete of up to 200 characters:
the document has a delete set, as an edited one does."""
SETTLE_S: Final = 1.0
"""Pause after seeding, before the baseline is read: the seed's work is done."""
STORM_TIMEOUT_S: Final = 600
NETNS_ENV: Final = "SYNCD_JOIN_STORM_NETNS"
"""Set in the study's own network namespace (see --sndbuf-max)."""
KINDS: Final = ("yjs", "ws", "sse")
RGA: Final = "rg:storm"
RGA_INSERT_CHARS: Final = 10_000
"""Characters per insert of the rga's seed: well under the 1 MiB body limit."""


def seed_document(doc_bytes: int) -> tuple[list[str], str]:
    """The seed updates (base64) and the text they make; their document's
    whole update is ``doc_bytes`` or just over (checked every 50 inserts)."""
    from pycrdt import Doc, Text

    rng = random.Random(SEED)
    doc: Doc[Any] = Doc(client_id=1)
    text = doc.get("content", type=Text)
    updates: list[str] = []
    doc.observe(lambda event: updates.append(base64.b64encode(event.update).decode()))
    n = 0
    while True:
        with doc.transaction():
            length = len(text)
            text.insert(
                rng.randint(0, length), " ".join(rng.choice(WORDS) for _ in range(INSERT_WORDS))
            )
            if length > 2000 and rng.random() < DELETE_SHARE:
                at = rng.randint(0, length - 200)
                del text[at : at + rng.randint(1, 200)]
        n += 1
        if n % 50 == 0 and len(doc.get_update()) >= doc_bytes:
            return updates, str(text)


def hwm_reset(pid: int) -> None:
    """Start the process's peak RSS (VmHWM) again from its current RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


@contextlib.contextmanager
def running(name: str, code: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(pid, load config) of a running server: syncd from ``code``, or a Node peer."""
    if name == "syncd":
        with idle_connections.server(code, 1000) as (port, proc):
            token = bench_token(port, NS)
            base = f"ws://127.0.0.1:{port}/v1/namespaces/{NS}/yjs"
            yield proc.pid, {"protocol": "y-websocket", "url": base, "token": token}
        return
    with (
        tempfile.TemporaryDirectory(prefix="syncd-storm-") as data_dir,
        yjs.server(name, data_dir) as (_port, pid, config),
    ):
        yield pid, config


def _call(port: int, token: str, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/namespaces/{NS}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def seed_rga(port: int, token: str, doc_bytes: int) -> dict[str, Any]:
    """Inserts at random places until the rga holds ``doc_bytes`` characters
    (its snapshot is about as many bytes); its ``?format=crdt`` read."""
    rng = random.Random(SEED)
    length = 0
    while length < doc_bytes:
        text = " ".join(rng.choice(WORDS) for _ in range(RGA_INSERT_CHARS // 6))
        body = {"op": "insert", "index": rng.randint(0, length), "text": text}
        _call(port, token, "POST", f"/crdts/{RGA}/ops", body)
        length += len(text)
    read: dict[str, Any] = _call(port, token, "GET", f"/crdts/{RGA}?format=crdt")
    return read


def snapshot_bytes(read: dict[str, Any]) -> int:
    """The size of the snapshot delta the server sends for ``read``."""
    delta = {"kind": "snapshot", "ns": NS, **read}
    return len(msgpack.packb(delta, use_bin_type=True))


def storm_yjs(
    label: str, name: str, code: Path, files: dict[str, str], joiners: int, hold_ms: int
) -> dict[str, Any]:
    """One Yjs storm: ``name``'s server (syncd from ``code``), seeded by the
    load, then stormed."""
    with running(name, code) as (pid, config):
        room = ROOM if name == "syncd" else "storm"
        load_config = {**config, "room": room, "joiners": joiners, "hold_ms": hold_ms, **files}
        cmd = pinned(["node", str(yjs.PEERS / "join.mjs"), json.dumps(load_config)], LOAD_CORE)
        return measured(label, "yjs", pid, cmd, None)


def storm_native(
    label: str, kind: str, code: Path, joiners: int, doc_bytes: int, hold_ms: int
) -> dict[str, Any]:
    """One native WebSocket or SSE storm of syncd from ``code``."""
    with (
        idle_connections.server(code, 1000) as (port, proc),
        tempfile.TemporaryDirectory(prefix="syncd-storm-") as tmp,
    ):
        token = bench_token(port, NS)
        expected = seed_rga(port, token, doc_bytes)
        path = Path(tmp) / "expected.json"
        path.write_text(json.dumps(expected))
        config = {
            "kind": kind,
            "port": port,
            "ns": NS,
            "id": RGA,
            "token": token,
            "joiners": joiners,
            "expected": str(path),
            "hold_ms": hold_ms,
        }
        cmd = pinned([sys.executable, "-m", "perf.lib.join_clients", json.dumps(config)], LOAD_CORE)
        return measured(label, kind, proc.pid, cmd, snapshot_bytes(expected))


def measured(
    label: str, kind: str, pid: int, cmd: list[str], doc_bytes: int | None
) -> dict[str, Any]:
    """Run the load ``cmd`` against the server ``pid`` and measure the storm
    (see the module docstring). ``doc_bytes`` None: the load seeds the
    document and says how large it is."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if doc_bytes is None:
            doc_bytes = int(json.loads(proc.stdout.readline())["seeded"])
        time.sleep(SETTLE_S)
        rss_before = status_kib(pid, "VmRSS")
        cpu_before = cpu_seconds(pid)
        hwm_reset(pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{label} {kind}: the load exited with {proc.wait(30)}")
        result = json.loads(line)
        cpu = cpu_seconds(pid) - cpu_before
        peak = status_kib(pid, "VmHWM")
        proc.stdin.close()
        proc.wait(STORM_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    row = {
        "server": label,
        "kind": kind,
        **result,
        "doc_bytes": doc_bytes,
        "rss_before_mb": rss_before / 1024,
        "peak_mb": peak / 1024,
        "growth_mb": (peak - rss_before) / 1024,
        "cpu_s": cpu,
    }
    print(
        f"  {label:<12} {kind:<4} {row['synced']}/{row['joiners']} synced, "
        f"{row['exact']} exact, peak {row['peak_mb']:.0f} MB "
        f"(before {row['rss_before_mb']:.0f}), CPU {cpu:.2f} s, "
        f"all synced in {row['all_s']:.2f} s",
        flush=True,
    )
    return row


def run(
    kinds: list[str],
    names: list[str],
    joiners: int,
    doc_bytes: int,
    rounds: int,
    code: Path,
    compare: Path | None,
    hold_ms: int = 0,
) -> list[dict[str, Any]]:
    """Every storm, round by round: Yjs on each server of ``names``, native
    WebSocket and SSE on syncd; syncd as ``before`` and ``after`` with
    ``compare``, alternating which goes first."""

    for checkout in (code,) if compare is None else (compare, code):
        compile_syncd(checkout)

    def checkouts(round_no: int) -> list[tuple[str, Path]]:
        if compare is None:
            return [("syncd", code)]
        pair = [("before", compare), ("after", code)]
        return pair if round_no % 2 == 0 else pair[::-1]

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="syncd-storm-seed-") as tmp:
        files = {"updates": str(Path(tmp) / "updates.json"), "expected": str(Path(tmp) / "text")}
        if "yjs" in kinds:
            yjs.ensure_node_modules()
            updates, expected = seed_document(doc_bytes)
            Path(files["updates"]).write_text(json.dumps(updates))
            Path(files["expected"]).write_text(expected)
        print(
            f"join storm: {joiners} joiners, {', '.join(kinds)}, {rounds} rounds, "
            f"each joiner holding off {hold_ms} ms"
        )
        for round_no in range(rounds):
            print(f"round {round_no + 1}")
            for kind in kinds:
                for name in names if kind == "yjs" else ["syncd"]:
                    if name != "syncd":
                        rows.append(storm_yjs(name, name, code, files, joiners, hold_ms))
                        continue
                    for label, checkout in checkouts(round_no):
                        if kind == "yjs":
                            row = storm_yjs(label, name, checkout, files, joiners, hold_ms)
                        else:
                            row = storm_native(label, kind, checkout, joiners, doc_bytes, hold_ms)
                        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Print the table (and after/before ratios); the summary rows."""
    summary = summarize(rows)
    print()
    print(
        table(
            [
                [
                    s["kind"],
                    s["server"],
                    s["runs"],
                    f"{s['synced']}/{s['joiners']}",
                    f"{s['exact']}/{s['joiners']}",
                    f"{s['doc_bytes']:,}",
                    f"{s['peak_mb']:.0f}",
                    f"{s['rss_before_mb']:.0f}",
                    f"{s['growth_mb']:.0f}",
                    f"{s['cpu_s']:.2f}",
                    f"{s['all_s']:.2f}",
                ]
                for s in summary
            ],
            [
                "kind",
                "server",
                "runs",
                "synced (min)",
                "exact (min)",
                "document bytes",
                "peak RSS MB",
                "RSS before MB",
                "growth MB",
                "CPU s",
                "all synced s",
            ],
        )
    )
    print("(medians of the runs; synced and exact: the fewest of any run)")
    by = {(s["kind"], s["server"]): s for s in summary}
    for kind in dict.fromkeys(s["kind"] for s in summary):
        b, a = by.get((kind, "before")), by.get((kind, "after"))
        if a is not None and b is not None:
            print(
                f"{kind} after/before: peak RSS {_ratio(a, b, 'peak_mb')}, "
                f"CPU {_ratio(a, b, 'cpu_s')}, all synced {_ratio(a, b, 'all_s')}"
            )
    return summary


def _ratio(after: dict[str, Any], before: dict[str, Any], key: str) -> str:
    # CPU is counted in clock ticks (10 ms): a tiny storm may have none.
    return f"{after[key] / before[key]:.2f}x" if before[key] else "-"


def in_namespace(sndbuf_max: int, argv: list[str]) -> None:
    """Run this study again in a network namespace of its own whose send
    buffers grow to at most ``sndbuf_max`` (never returns)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        sys.exit("--sndbuf-max needs root, unshare and ip (a network namespace of its own)")
    setup = (
        "ip link set lo up && "
        f'sysctl -qw net.ipv4.tcp_wmem="4096 16384 {sndbuf_max}" && exec "$0" "$@"'
    )
    cmd = ["unshare", "-n", "--", "sh", "-c", setup, sys.executable, "-m", __spec__.name, *argv]
    os.execvpe("unshare", cmd, {**os.environ, NETNS_ENV: "1"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--joiners", type=int, default=150)
    parser.add_argument("--doc-bytes", type=int, default=4_000_000)
    parser.add_argument(
        "--hold-ms", type=int, default=0, help="each joiner reads nothing this long after asking"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kinds", default="yjs", help=f"of {', '.join(KINDS)}")
    parser.add_argument("--servers", default=",".join(yjs.SERVERS), help="for yjs")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--compare", type=Path, help="syncd's before checkout, run alternately")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument(
        "--sndbuf-max",
        type=int,
        default=0,
        help="run in a network namespace whose tcp_wmem maximum is this (0: the machine's)",
    )
    args = parser.parse_args(argv)
    if args.sndbuf_max and os.environ.get(NETNS_ENV) != "1":
        in_namespace(args.sndbuf_max, sys.argv[1:] if argv is None else argv)
    if args.sndbuf_max:
        print(f"in a network namespace of its own, net.ipv4.tcp_wmem max {args.sndbuf_max}")
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds: of {', '.join(KINDS)}")
    if "yjs" in kinds and not shutil.which("node"):
        sys.exit("perf.studies.join_storm's yjs storm needs Node (node and npm on PATH)")
    names = [s for s in args.servers.split(",") if s]
    rows = run(
        kinds,
        names,
        args.joiners,
        args.doc_bytes,
        args.rounds,
        args.code,
        args.compare,
        args.hold_ms,
    )
    summary = report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=2))
    return 0


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in dict.fromkeys((r["kind"], r["server"]) for r in rows):
        runs = [r for r in rows if (r["kind"], r["server"]) == key]
        out.append(
            {
                "kind": key[0],
                "server": key[1],
                "runs": len(runs),
                "joiners": runs[0]["joiners"],
                "synced": min(r["synced"] for r in runs),
                "exact": min(r["exact"] for r in runs),
                "doc_bytes": runs[0]["doc_bytes"],
                **{
                    k: statistics.median(r[k] for r in runs)
                    for k in ("peak_mb", "rss_before_mb", "growth_mb", "cpu_s", "all_s")
                },
            }
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
