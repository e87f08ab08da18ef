"""Where the time goes, in words: a summary of py-spy's folded stacks.

``make profile BENCH=<name> FORMAT=raw`` records folded stacks (one line per
distinct stack: ``frame;frame;...;frame count``, frames as ``func (file:line)``)
and writes this summary beside them, so a profile can be read in a review and
committed as text. Three views:

* by layer: each sample goes to the innermost frame that is our code
  (``syncd/<package>``), or, when no frame is ours, to the event loop;
  time spent in a library called from our code (json, msgpack, nacl,
  prometheus_client) is counted under the library by name and under the
  layer that called it;
* own time: the innermost frame of each sample, by function;
* inclusive time: every function on the stack, counted once per sample.

Usage: python -m perf.tools.profile_summary FOLDED [--top N] [--title T]
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

TOP = 25
"""Functions listed in the own and inclusive tables."""
LIBRARIES = ("json/", "msgpack/", "nacl/", "prometheus_client/", "h11/", "httptools/", "wsproto/")
"""Libraries whose share is worth its own line in the layer table."""

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def parse(lines: Iterable[str]) -> Iterator[tuple[list[tuple[str, str]], int]]:
    """Yield (frames outermost first as (function, file), samples) per folded line."""
    for raw in lines:
        line = raw.rstrip("\n")
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for part in stack.split(";"):
            found = _FRAME.match(part)
            if found is None:
                frames.append((part, ""))  # "process 123" or a thread name
            else:
                frames.append((found["func"], found["file"]))
        yield frames, int(count)


ENTRY_FILES = (
    "syncd/__main__.py",
    "syncd/cli/__init__.py",
    "syncd/cli/serve.py",
    "syncd/server.py",
)
"""Frames that only start the loop: time under them alone is the loop's own."""


def _is_entry(file: str) -> bool:
    return file in ENTRY_FILES or file.startswith("<frozen") or file == "asyncio/runners.py"


def layer_of(frames: list[tuple[str, str]]) -> str:
    for _func, file in reversed(frames):
        if file.startswith("syncd/") and file not in ENTRY_FILES:
            parts = file.split("/")
            return "/".join(parts[:2]) if len(parts) > 2 else file
    return "event loop, I/O and interpreter (no syncd frame)"


def library_of(frames: list[tuple[str, str]]) -> str | None:
    file = frames[-1][1] if frames else ""
    for lib in LIBRARIES:
        if lib in file:
            return lib.rstrip("/")
    return None


def thread_of(frames: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """Split py-spy's ``--threads`` root frame (``thread (tid): Name``) off a stack."""
    if frames and frames[0][0].startswith("thread ("):
        name = frames[0][0].partition(": ")[2] or "thread"
        return re.sub(r"_\d+$", "", name), frames[1:]
    return "MainThread", frames


def summarize(path: Path, top: int = TOP, title: str | None = None) -> str:
    by_thread: Counter[str] = Counter()
    thread_own: dict[str, Counter[str]] = {}
    layers: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        for all_frames, count in parse(f):
            thread, frames = thread_of(all_frames)
            by_thread[thread] += count
            if not frames:
                continue
            func, file = frames[-1]
            if thread != "MainThread":
                thread_own.setdefault(thread, Counter())[f"{func} ({file})"] += count
                continue
            layers[layer_of(frames)] += count
            lib = library_of(frames)
            if lib is not None:
                libraries[lib] += count
            own[f"{func} ({file})"] += count
            for name in {f"{fn} ({fl})" for fn, fl in frames if fl and not _is_entry(fl)}:
                inclusive[name] += count
    total = sum(by_thread.values())
    main = by_thread["MainThread"]
    if total == 0:
        return f"# {title or path.stem}\n\nNo samples.\n"

    def pct(n: int, of: int) -> str:
        return f"{100 * n / of:.1f}%"

    out = [
        f"# {title or path.stem}",
        "",
        f"{total:,} samples (py-spy, 100 Hz per thread; a thread blocked in a call py-spy does "
        "not know as idle, such as fsync, counts as busy though it uses no CPU). Own time in "
        "`Runner.run` is uvloop's C code: epoll, socket reads and writes.",
        "",
        "## By thread",
        "",
        "| thread | share of samples |",
        "|---|---|",
    ]
    out += [f"| {name} | {pct(n, total)} |" for name, n in by_thread.most_common()]
    for name, counter in sorted(thread_own.items()):
        out += [
            "",
            f"{name}, own time: "
            + ", ".join(f"`{fn}` {pct(n, by_thread[name])}" for fn, n in counter.most_common(4))
            + ".",
        ]
    if main:
        out += ["", "## Main thread by layer (innermost syncd frame)", ""]
        out += ["| layer | share of the main thread |", "|---|---|"]
        out += [f"| {name} | {pct(n, main)} |" for name, n in layers.most_common()]
        if libraries:
            out += [
                "",
                "Inside libraries (leaf frame): "
                + ", ".join(f"{name} {pct(n, main)}" for name, n in libraries.most_common())
                + ".",
            ]
        out += ["", "## Main thread: own time (innermost frame)", ""]
        out += ["| function | share |", "|---|---|"]
        out += [f"| `{name}` | {pct(n, main)} |" for name, n in own.most_common(top)]
        out += ["", "## Main thread: inclusive time (on the stack, start-up frames left out)", ""]
        out += ["| function | share |", "|---|---|"]
        out += [f"| `{name}` | {pct(n, main)} |" for name, n in inclusive.most_common(top)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("folded", type=Path)
    parser.add_argument("--top", type=int, default=TOP)
    parser.add_argument("--title")
    args = parser.parse_args(argv)
    sys.stdout.write(summarize(args.folded, args.top, args.title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
