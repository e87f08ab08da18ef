"""A cluster node's start against a database that refuses it, is away, or cannot
stream: the real ``syncd serve`` process on real PostgreSQL servers.

A refusal that waiting cannot fix (no such database, a refused password, a
wal_level that cannot feed SERVICE_WAL_CONNSTR) is one line naming the
variable and exit 2, before anything binds; a server that is away is waited
for, with the reason logged, and SIGTERM ends the wait with exit 0.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from syncd.store.pg_schema import SCHEMA_LOCK_KEY
from tests.cluster.pgdb import database_url
from tests.conftest import ADMIN, SIGNING_KEY_HEX, Subprocess, free_port, wait_ready
from tests.pgserver import ThrowawayPostgres, throwaway_postgres

pytestmark = pytest.mark.timeout(90)

PASSWORD = "pw-" + secrets.token_hex(8)
EXIT_TIMEOUT_S = 30
"""Longest a refused start may take: one connection attempt, and Python's start."""


@pytest.fixture(scope="module")
def replica_pg() -> Iterator[ThrowawayPostgres]:
    """A server as many are configured: passwords over TCP, wal_level=replica
    (physical replication only, so no logical slot can ever be made)."""
    with throwaway_postgres({"wal_level": "replica"}, password=PASSWORD) as server:
        yield server


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SERVICE_BIND": f"127.0.0.1:{free_port()}",
        "SERVICE_DATA_DIR": str(tmp_path / "data"),
        "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
        "SERVICE_ADMIN_TOKEN": ADMIN,
        "SERVICE_NODE_ID": "start",
        **extra,
    }


def refused_start(env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``syncd serve`` to its end: the exit status and the lines of stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "syncd", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT_S,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr.strip().splitlines()


def bound(env: dict[str, str]) -> bool:
    port = int(env["SERVICE_BIND"].rsplit(":", 1)[1])
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_missing_database_is_one_line_and_exit_2(
    replica_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    env = serve_env(tmp_path, DATABASE_URL=f"{replica_pg.url}/syncd_missing")
    code, lines = refused_start(env)
    assert code == 2
    assert lines == ['syncd: DATABASE_URL: database "syncd_missing" does not exist']


def test_a_refused_password_is_one_line_and_exit_2(
    replica_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    url = f"{replica_pg.url}/postgres".replace(PASSWORD, "not-the-password")
    code, lines = refused_start(serve_env(tmp_path, DATABASE_URL=url))
    assert code == 2
    assert lines == ['syncd: DATABASE_URL: password authentication failed for user "syncd"']


def test_a_url_without_the_password_is_one_line_and_exit_2(
    replica_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    url = f"{replica_pg.url}/postgres".replace(f":{PASSWORD}@", "@")
    code, lines = refused_start(serve_env(tmp_path, DATABASE_URL=url))
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("syncd: DATABASE_URL: "), lines
    assert "no password supplied" in lines[0]


def test_a_search_path_without_an_existing_schema_is_one_line_and_exit_2(
    replica_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    url = f"{replica_pg.url}/postgres?options=-csearch_path%3Dsyncd_missing"
    code, lines = refused_start(serve_env(tmp_path, DATABASE_URL=url))
    assert code == 2
    assert lines == [
        "syncd: DATABASE_URL: no schema of its search_path (syncd_missing) exists:"
        " create it (CREATE SCHEMA) or name one that exists"
    ]


def test_wal_connstr_on_a_replica_wal_level_is_one_line_and_exit_2(
    replica_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    url = f"{replica_pg.url}/postgres"
    env = serve_env(tmp_path, DATABASE_URL=url, SERVICE_WAL_CONNSTR=url)
    code, lines = refused_start(env)
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("syncd: SERVICE_WAL_CONNSTR: the server's wal_level is replica;")
    assert "wal_level = logical" in lines[0]
    assert not bound(env)


def test_wal_connstr_naming_another_database_is_one_line_and_exit_2(
    tmp_path: Path, cluster_db: str
) -> None:
    """Logical decoding reads one database: a stream on another one (the
    server's ``postgres``) never sees this deployment's ops, yet said
    ``streaming`` while large ops reached other nodes only at a reconcile."""
    env = serve_env(
        tmp_path,
        DATABASE_URL=database_url(cluster_db),
        SERVICE_WAL_CONNSTR=database_url("postgres"),
    )
    code, lines = refused_start(env)
    assert code == 2
    assert lines == [
        f"syncd: SERVICE_WAL_CONNSTR: it reaches database 'postgres', DATABASE_URL"
        f" database {cluster_db!r}: the stream reads the changes of one database,"
        " so it must name DATABASE_URL's"
    ]
    assert not bound(env)


def test_a_refused_password_in_wal_connstr_names_that_variable(
    replica_pg: ThrowawayPostgres, tmp_path: Path
) -> None:
    url = f"{replica_pg.url}/postgres"
    wrong = url.replace(PASSWORD, "not-the-password")
    code, lines = refused_start(serve_env(tmp_path, DATABASE_URL=url, SERVICE_WAL_CONNSTR=wrong))
    assert code == 2
    assert lines == ['syncd: SERVICE_WAL_CONNSTR: password authentication failed for user "syncd"']


def wait_for_log(node: Subprocess, text: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in node.log():
        if node.proc.poll() is not None:
            raise AssertionError(f"exited with {node.proc.returncode}:\n{node.log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not logged:\n{node.log()}")
        time.sleep(0.05)
    return node.log()


WAITING = "waiting for PostgreSQL (DATABASE_URL): connection to server at"


def test_sigterm_while_waiting_for_postgresql_exits_cleanly(
    spawn_server: Callable[..., Subprocess],
) -> None:
    port = free_port()  # nothing listens there
    node = spawn_server(
        {"DATABASE_URL": f"postgresql://syncd@127.0.0.1:{port}/syncd", "SERVICE_NODE_ID": "w"},
        ready=False,
    )
    log = wait_for_log(node, "Connection refused; trying again in")
    assert WAITING in log and f"port {port} failed: Connection refused" in log
    assert "unreachable" not in log  # it says what failed, not a guess
    started = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(10) == 0
    assert time.monotonic() - started < 5
    log = node.log()
    assert "Traceback" not in log and "stopped before it started" in log, log


def test_a_node_waits_for_postgresql_and_then_starts(
    spawn_server: Callable[..., Subprocess],
) -> None:
    """Started before its database (refused meanwhile), it serves once the server is up."""
    server = ThrowawayPostgres()
    try:
        node = spawn_server(
            {"DATABASE_URL": f"{server.url}/postgres", "SERVICE_NODE_ID": "late"}, ready=False
        )
        wait_for_log(node, WAITING)
        server.start()
        wait_ready(node.port, node.proc, timeout=30)
        assert node.terminate() == 0
    finally:
        server.stop()


def test_a_node_waiting_for_the_schema_lock_says_who_holds_it(
    spawn_server: Callable[..., Subprocess], cluster_db: str
) -> None:
    """Another session holds the migration lock (a node migrating, or one stopped
    mid-way with its connection open): the start waits, and logs why instead
    of hanging in silence; it starts once the lock is released."""
    url = database_url(cluster_db)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
        node = spawn_server({"DATABASE_URL": url, "SERVICE_NODE_ID": "locked"}, ready=False)
        log = wait_for_log(node, "waiting for the schema lock")
        assert f"held by PostgreSQL session {holder.info.backend_pid} (" in log, log
        assert not bound({"SERVICE_BIND": f"127.0.0.1:{node.port}"})
    wait_ready(node.port, node.proc)
    assert "schema lock free again" in node.log()
    assert node.terminate() == 0
