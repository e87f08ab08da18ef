"""The container files, checked without a container engine (none runs here).

The Dockerfile and compose.yaml are parsed for their essentials; the image's
health check command is run for real against a real server; every variable
they set is one syncd reads.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Subprocess, free_port

ROOT = Path(__file__).resolve().parents[1]
CONFIG_SOURCE = (ROOT / "syncd" / "config.py").read_text(encoding="utf-8")
HEALTHCHECK_TIMEOUT_S = 10


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    joined = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def instructions(name: str) -> list[str]:
    return [args for word, args in dockerfile() if word == name]


def test_dockerfile_base_user_volume_port() -> None:
    assert instructions("FROM") == ["python:3.11-slim"]
    assert instructions("USER") == ["syncd"]
    # The last USER comes after every RUN: nothing runs as root at run time.
    words = [w for w, _ in dockerfile()]
    assert max(i for i, w in enumerate(words) if w == "RUN") < words.index("USER")
    assert json.loads(instructions("VOLUME")[0]) == ["/data"]
    assert instructions("EXPOSE") == ["3000"]
    env = " ".join(instructions("ENV"))
    assert "SERVICE_DATA_DIR=/data" in env and "SERVICE_BIND=0.0.0.0:3000" in env
    assert json.loads(instructions("ENTRYPOINT")[0]) == ["syncd"]
    assert json.loads(instructions("CMD")[0]) == ["serve"]


def test_dockerfile_installs_the_fast_extra() -> None:
    assert "EXTRAS=fast" in instructions("ARG")
    assert any('pip install ".[${EXTRAS}]"' in run for run in instructions("RUN"))


def test_dockerignore_lets_in_what_the_image_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for copy in instructions("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            assert source.rstrip("/").removeprefix("./") in allowed, source
            assert (ROOT / source).exists(), source


def healthcheck_command() -> list[str]:
    args = instructions("HEALTHCHECK")[0]
    assert "--interval" in args and "--timeout" in args
    command = json.loads(args[args.index("CMD") + 3 :].strip())
    assert command == ["syncd", "health"], "the settings serve reads: scheme, address"
    return [sys.executable, "-m", "syncd", *command[1:]]


def test_healthcheck_passes_on_a_ready_server_and_fails_without_one(
    spawn_server: Callable[..., Subprocess],
) -> None:
    server = spawn_server()
    bind = {**os.environ, "SERVICE_BIND": f"0.0.0.0:{server.port}"}
    ok = subprocess.run(healthcheck_command(), env=bind, timeout=HEALTHCHECK_TIMEOUT_S)
    assert ok.returncode == 0
    nobody = {**os.environ, "SERVICE_BIND": f"0.0.0.0:{free_port()}"}
    down = subprocess.run(
        healthcheck_command(), env=nobody, capture_output=True, timeout=HEALTHCHECK_TIMEOUT_S
    )
    assert down.returncode == 1  # Docker reserves 2


# --- compose.yaml ---------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


def _syncd_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if name.startswith("syncd")}


def test_compose_postgres_has_logical_wal(compose: dict[str, Any]) -> None:
    postgres = compose["services"]["postgres"]
    command = postgres["command"]
    command = shlex.split(command) if isinstance(command, str) else command
    assert "wal_level=logical" in command
    assert "healthcheck" in postgres
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])


def test_compose_two_nodes_one_database(compose: dict[str, Any]) -> None:
    nodes = _syncd_services(compose)
    assert len(nodes) == 2
    node_ids = {s["environment"]["SERVICE_NODE_ID"] for s in nodes.values()}
    assert len(node_ids) == 2, "nodes of one cluster need distinct SERVICE_NODE_IDs"
    urls = {s["environment"]["DATABASE_URL"] for s in nodes.values()}
    assert len(urls) == 1 and "@postgres:5432/" in urls.pop()
    keys = {s["environment"]["SERVICE_SIGNING_KEY"] for s in nodes.values()}
    assert len(keys) == 1, "tokens must verify on every node"
    for service in nodes.values():
        assert "postgres" in service["build"]["args"]["EXTRAS"]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert [v.split(":")[1] for v in service["volumes"]] == ["/data"]
        assert service["volumes"][0].split(":")[0] in compose["volumes"]
    published = [p.split(":")[0] for s in nodes.values() for p in s["ports"]]
    assert len(set(published)) == 2


def test_every_variable_set_is_one_syncd_reads(compose: dict[str, Any]) -> None:
    names: set[str] = set()
    for service in _syncd_services(compose).values():
        names.update(service["environment"])
    names.update(re.findall(r"\b(SERVICE_[A-Z_]+|DATABASE_URL)=", " ".join(instructions("ENV"))))
    assert names
    for name in names:
        assert f'"{name}"' in CONFIG_SOURCE, name
