"""Agent tools: a pair whose type is not the one its id's prefix fixes
(``("gc:x", "orset")``: ``gc:`` is a gcounter) is refused when the tools are
built, as an invalid id is, and ``syncd mcp --crdt gc:x:orset`` exits 2 with
one line before serving. It was built: the model was offered an ``add`` tool
on a set that every call of would answer ``type_mismatch``, and a read tool
that described a counter as a set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from syncd.client.tools import build_tools
from tests.client.conftest import NS, make_token

REPO = Path(__file__).resolve().parents[2]
EXIT_TIMEOUT_S = 30


@pytest.mark.parametrize(
    "pair", [("gc:x", "orset"), ("yd:notes", "gcounter"), ("rg:text", "lwwregister")]
)
def test_a_type_the_prefix_contradicts_is_refused(pair: tuple[str, str]) -> None:
    crdt_id, crdt_type = pair
    with pytest.raises(ValueError, match="prefix") as refused:
        build_tools([pair])
    assert repr(crdt_id) in str(refused.value) and crdt_type in str(refused.value)


def test_the_type_the_prefix_fixes_and_unprefixed_ids_are_built() -> None:
    tools = build_tools([("gc:x", "gcounter"), ("notes", "rga"), ("ab:c", "orset")])
    assert {tool.crdt_type for tool in tools} == {"gcounter", "rga", "orset"}


def test_syncd_mcp_refuses_it_before_serving() -> None:
    args = ["--base-url", "http://127.0.0.1:9", "--token", make_token(3), "--namespace", NS]
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "mcp", *args, "--crdt", "gc:x:orset"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
        timeout=EXIT_TIMEOUT_S,
    )
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "gcounter" in done.stderr, done.stderr
