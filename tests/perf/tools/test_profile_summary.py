"""The profile summarizer reads py-spy's folded stacks as py-spy writes them."""

from __future__ import annotations

from pathlib import Path

from perf.tools.profile_summary import summarize

FOLDED = """\
process 1:"python -m syncd";<module> (syncd/__main__.py:3);run (uvloop/__init__.py:82);_dispatch (syncd/http/protocol.py:270);ops (syncd/http/handlers/crdts.py:40);loads (json/__init__.py:346) 30
process 1:"python -m syncd";<module> (syncd/__main__.py:3);run (uvloop/__init__.py:82);_dispatch (syncd/http/protocol.py:270);ops (syncd/http/handlers/crdts.py:41);apply (syncd/crdt/engine.py:250) 50
process 1:"python -m syncd";<module> (syncd/__main__.py:3);run (uvloop/__init__.py:82);_dispatch (syncd/http/protocol.py:271) 10
process 1:"python -m syncd";run (uvloop/__init__.py:82) 10
thread (77): syncd-log_0;_worker (concurrent/futures/thread.py:81);fsync (syncd/store/log.py:90) 100
not a stack line
"""


def test_layers_own_and_inclusive_shares(tmp_path: Path) -> None:
    path = tmp_path / "x.folded"
    path.write_text(FOLDED)
    text = summarize(path, title="T")
    assert text.startswith("# T\n")
    assert "200 samples" in text
    # threads apart: the log thread's fsync does not dilute the event loop's shares
    assert "| MainThread | 50.0% |" in text and "| syncd-log | 50.0% |" in text
    assert "syncd-log, own time: `fsync (syncd/store/log.py)` 100.0%" in text
    # innermost syncd frame decides the layer; a library leaf counts under its caller
    assert "| syncd/crdt | 50.0% |" in text
    assert "| syncd/http | 40.0% |" in text
    assert "| event loop, I/O and interpreter (no syncd frame) | 10.0% |" in text
    assert "json 30.0%" in text
    # own time by function (line numbers folded together), inclusive counted once per sample
    assert "| `apply (syncd/crdt/engine.py)` | 50.0% |" in text
    assert "| `_dispatch (syncd/http/protocol.py)` | 90.0% |" in text
    assert "| `ops (syncd/http/handlers/crdts.py)` | 80.0% |" in text


def test_empty_profile(tmp_path: Path) -> None:
    path = tmp_path / "empty.folded"
    path.write_text("")
    assert "No samples." in summarize(path)
