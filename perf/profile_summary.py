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

Usage: python -m perf.profile_summary FOLDED [--top N] [--title T]
"""

from __future__ import annotations

import argparse
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


def layer_of(frames: list[tuple[str, str]]) -> str:
    for _func, file in reversed(frames):
        if file.startswith("syncd/"):
            parts = file.split("/")
            return "/".join(parts[:2]) if len(parts) > 2 else file
    return "event loop, I/O and interpreter (no syncd frame)"


def library_of(frames: list[tuple[str, str]]) -> str | None:
    file = frames[-1][1] if frames else ""
    for lib in LIBRARIES:
        if lib in file:
            return lib.rstrip("/")
    return None


def summarize(path: Path, top: int = TOP, title: str | None = None) -> str:
    total = 0
    layers: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    with path.open() as f:
        for frames, count in parse(f):
            total += count
            layers[layer_of(frames)] += count
            lib = library_of(frames)
            if lib is not None:
                libraries[lib] += count
            func, file = frames[-1]
            own[f"{func} ({file})"] += count
            for name in {f"{fn} ({fl})" for fn, fl in frames if fl}:
                inclusive[name] += count
    if total == 0:
        return f"# {title or path.stem}\n\nNo samples.\n"

    def pct(n: int) -> str:
        return f"{100 * n / total:.1f}%"

    out = [
        f"# {title or path.stem}",
        "",
        f"{total:,} samples (py-spy, 100 Hz, idle time excluded).",
        "",
    ]
    out += ["## By layer (innermost syncd frame)", "", "| layer | share |", "|---|---|"]
    out += [f"| {name} | {pct(n)} |" for name, n in layers.most_common()]
    if libraries:
        out += [
            "",
            "Inside libraries (leaf frame): "
            + ", ".join(f"{name} {pct(n)}" for name, n in libraries.most_common())
            + ".",
        ]
    out += ["", "## Own time (innermost frame)", "", "| function | share |", "|---|---|"]
    out += [f"| `{name}` | {pct(n)} |" for name, n in own.most_common(top)]
    out += ["", "## Inclusive time (on the stack)", "", "| function | share |", "|---|---|"]
    out += [f"| `{name}` | {pct(n)} |" for name, n in inclusive.most_common(top)]
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
