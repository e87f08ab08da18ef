"""wrk as a load generator: run it on the load core, read what it prints.

wrk is written in C, so it saturates much later than the Python generator
(perf.lib.loadgen): against the raw uvloop peer the Python generator can be
the bottleneck, which would flatter every ratio against that peer. One wrk
thread on the load core uses the whole core and no more. Each measurement is
preceded by a warm-up run; wrk's CPU share comes from its rusage, so a
saturated wrk shows as such. wrk is optional: :func:`find_wrk` says whether
it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perf.lib.proc import cpu_seconds
from perf.lib.servers import LOAD_CORE, pinned

WRK_THREADS = 1
"""One wrk thread on the load core: the whole core, no more."""

_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def find_wrk() -> str | None:
    return shutil.which("wrk")


def wrk_version(path: str) -> str:
    """``wrk 4.1.0 [epoll]``: the first line of ``wrk --version``, without the copyright."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True)
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0].split(" Copyright")[0] if text else ""


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(f"wrk latency {text!r}")
    return float(m.group(1)) * _UNITS_MS[m.group(2)]


def parse_wrk(out: str) -> dict[str, Any]:
    """Requests/s, p50 and p99 in ms, non-2xx answers and socket errors from wrk's output."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rps is None:
        raise RuntimeError(f"wrk printed no Requests/sec:\n{out}")
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    done = re.search(r"(\d+) requests in", out)
    return {
        "rps": float(rps.group(1)),
        "requests": int(done.group(1)) if done else 0,
        "p50_ms": _ms(pct["50"]) if "50" in pct else None,
        "p99_ms": _ms(pct["99"]) if "99" in pct else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(map(int, errors.groups())) if errors else 0,
    }


def wrk_lua(path: Path, method: str, body: str, headers: Sequence[str]) -> None:
    """The Lua script that gives wrk the request's method, body and headers."""
    lines = [f'wrk.method = "{method}"']
    if body:
        lines.append(f"wrk.body = [==[{body}]==]")
        lines.append('wrk.headers["Content-Type"] = "application/json"')
    for h in headers:
        name, _, value = h.partition(":")
        lines.append(f'wrk.headers["{name.strip()}"] = [==[{value.strip()}]==]')
    path.write_text("\n".join(lines) + "\n")


def wrk(
    program: str,
    tmp: Path,
    port: int,
    path: str,
    *,
    method: str = "GET",
    body: str = "",
    headers: Sequence[str] = (),
    connections: int = 32,
    duration: float = 5.0,
    warmup: float = 1.0,
    pid: int | None = None,
) -> dict[str, Any]:
    """One wrk run on the load core after a warm-up run; its CPU from its rusage.
    With ``pid``, the server's CPU over the measured run too: ``server_cpu_s``,
    and ``us_per_request``, its CPU microseconds per answered request."""
    script = tmp / f"wrk-{time.monotonic_ns()}.lua"
    wrk_lua(script, method, body, headers)
    url = f"http://127.0.0.1:{port}{path}"

    def once(seconds: float) -> tuple[str, float, float]:
        secs = max(1, round(seconds))
        cmd = [program, f"-t{WRK_THREADS}", f"-c{connections}", f"-d{secs}s"]
        cmd += ["--latency", "-s", str(script), url]
        started = time.perf_counter()
        proc = subprocess.Popen(pinned(cmd, LOAD_CORE), stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"wrk exited with {proc.returncode}:\n{out}")
        return out, usage.ru_utime + usage.ru_stime, wall

    if warmup > 0:
        once(warmup)
    server0 = cpu_seconds(pid) if pid is not None else 0.0
    out, cpu, wall = once(duration)
    result = parse_wrk(out)
    result["generator_cpu"] = cpu / wall / WRK_THREADS
    if pid is not None:
        server = cpu_seconds(pid) - server0
        result["server_cpu_s"] = server
        result["us_per_request"] = server / max(result["requests"], 1) * 1e6
    return result
