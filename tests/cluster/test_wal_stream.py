"""The replication stream's state as an operator sees it: the
``service_cluster_wal_stream_state`` gauge and ``wal_stream`` in
``/health/ready``, on real nodes whose stream is taken away and given back."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from psycopg import sql

from tests.cluster.pgdb import admin_connect, database_url, server_url
from tests.cluster.support import node_env
from tests.conftest import Subprocess

pytestmark = pytest.mark.timeout(90)

STATE_WAIT_S = 20.0
"""The stream reconnects with backoff up to 5 s (syncd/cluster/wal.py)."""


@pytest.fixture
def replication_role() -> Iterator[str]:
    """A role of its own for the stream, so the test can take REPLICATION away."""
    if "://syncd@" not in server_url():
        pytest.skip("SYNCD_TEST_PG names another user")
    role = "syncd_t_" + secrets.token_hex(4)
    with admin_connect() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN REPLICATION").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        with admin_connect() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
            )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def set_replication(role: str, allowed: bool, *, end_stream: bool = False) -> None:
    attribute = "REPLICATION" if allowed else "NOREPLICATION"
    with admin_connect() as conn:
        conn.execute(sql.SQL("ALTER ROLE {} {}").format(sql.Identifier(role), sql.SQL(attribute)))
        if end_stream:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE usename = %s AND backend_type = 'walsender'",
                (role,),
            )


def ready(node: Subprocess) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{node.url}/health/ready", timeout=5)
    return answer.status_code, answer.json()


def gauge(node: Subprocess) -> dict[str, float]:
    text = httpx.get(f"{node.url}/metrics", timeout=5).text
    found = re.findall(r'^service_cluster_wal_stream_state\{state="(\w+)"\} (\S+)$', text, re.M)
    return {state: float(value) for state, value in found}


def wait_state(node: Subprocess, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + STATE_WAIT_S
    while True:
        status, body = ready(node)
        if body.get("wal_stream") == state:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"wal_stream is {body.get('wal_stream')!r}, not {state!r}")
        time.sleep(0.1)


def wait_logged_refusal(node: Subprocess) -> None:
    """The stream's retries log why, in the server's words (PostgreSQL 15,
    then 16 and later, refusing a role without REPLICATION)."""
    deadline = time.monotonic() + STATE_WAIT_S
    while True:
        refusals = re.findall(
            r"replication stream \(SERVICE_WAL_CONNSTR\): (.*); retrying", node.log()
        )
        if any("replication role" in r or "start WAL sender" in r for r in refusals):
            return
        if time.monotonic() > deadline:
            raise AssertionError(refusals)
        time.sleep(0.1)


def test_the_stream_state_is_a_gauge_and_in_readiness(
    spawn_server: Callable[..., Subprocess], cluster_db: str, replication_role: str
) -> None:
    url = database_url(cluster_db)
    stream_url = url.replace("://syncd@", f"://{replication_role}@", 1)
    prefix = "t" + secrets.token_hex(4)
    node = spawn_server(
        node_env(
            url,
            "streamer",
            SERVICE_WAL_CONNSTR=stream_url,
            SERVICE_WAL_SLOT=prefix,
            SERVICE_WAL_PUB=prefix + "_pub",
        )
    )
    body = wait_state(node, "streaming")
    assert body["status"] == "ready" and set(body) == {"status", "wal_last_seq", "wal_stream"}
    assert gauge(node) == {"off": 0.0, "connecting": 0.0, "streaming": 1.0}

    # The role loses REPLICATION and its stream ends: the node reconnects in
    # vain, says so, and still takes writes.
    set_replication(replication_role, False, end_stream=True)
    wait_state(node, "connecting")
    assert gauge(node) == {"off": 0.0, "connecting": 1.0, "streaming": 0.0}
    assert ready(node)[0] == 200
    wait_logged_refusal(node)

    set_replication(replication_role, True)
    wait_state(node, "streaming")
    assert gauge(node)["streaming"] == 1.0

    # A node without SERVICE_WAL_CONNSTR: off.
    plain = spawn_server(node_env(url, "plain"))
    status, body = ready(plain)
    assert status == 200 and body["wal_stream"] == "off"
    assert gauge(plain) == {"off": 1.0, "connecting": 0.0, "streaming": 0.0}
    assert node.terminate() == 0 and plain.terminate() == 0
