"""Every Python example of docs/python-client.md, run as printed against a real server.

Each ```python block is a whole script: it runs in its own interpreter with
SYNCD_BASE_URL, SYNCD_TOKEN and SYNCD_NAMESPACE pointing at a server started
here, and must exit 0. The values the examples print are checked where the
page states them in a comment.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ADMIN, Subprocess

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python-client.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


TOKEN_BLOCK = re.findall(r"<!-- token -->\n```sh\n(.*?)```", DOC.read_text(), flags=re.S)


def issue_token(port: int) -> str:
    """The token the page tells its reader to issue, by its own block, as printed."""
    (block,) = TOKEN_BLOCK
    script = block.replace("localhost:3000", f"127.0.0.1:{port}") + 'printf %s "$SYNCD_TOKEN"\n'
    result = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "SERVICE_ADMIN_TOKEN": ADMIN},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0 and result.stdout.count(".") == 1, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def server_env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.conftest import ADMIN, SIGNING_KEY_HEX, free_port, wait_ready

    data = tmp_path_factory.mktemp("data")
    port = free_port()
    env = {
        "SERVICE_BIND": f"127.0.0.1:{port}",
        "SERVICE_DATA_DIR": str(data),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_FSYNC": "never",
    }
    import os

    proc = subprocess.Popen(
        [sys.executable, "-m", "syncd"],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, proc)
        yield {
            "SYNCD_BASE_URL": f"http://127.0.0.1:{port}",
            "SYNCD_TOKEN": issue_token(port),
            "SYNCD_NAMESPACE": "app",
        }
    finally:
        Subprocess(proc, port, data / "log").kill()


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) >= 7


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_example_runs(index: int, server_env: dict[str, str]) -> None:
    import os

    result = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=ROOT,
        env={**os.environ, **server_env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    block = BLOCKS[index]
    if "or:tags" in block:
        assert "['blue']" in out and "None" in out
    if "subscribe(" in block:
        assert out.splitlines()[:2] == ["snapshot 1", "op 2"]
    if "replica(" in block:
        assert out.splitlines() == ["['apple']", "['apple', 'pear']"]
    if "not-a-token" in block:
        assert out.startswith("refused before any request:")
    if "decrement" in block and "ServiceError" in block:
        assert out.splitlines() == ["400 invalid_op", "1", "unreachable"]
    if "AgentTools" in block and "service_revert_" not in block:
        assert "service_increment_gc_page_views" in out and "'ok': True" in out
    if "service_revert_" in block:
        assert out.splitlines() == [
            "TL;DR: ship. Ship. Bring cake.",
            "['delete', 'insert']",
            "2 Ship on Monday. Bring cake.",
        ]
