"""Three nodes on one PostgreSQL of the test's own: a node SIGKILLed and restarted,
PostgreSQL restarted, a node SIGSTOPped for 10 s, all under load from writers on
every node that retry with the same op_id. See tests/cluster/faults.py."""

from __future__ import annotations

import pytest

from tests.cluster.faults import Spawn, run_faults
from tests.pgserver import ThrowawayPostgres

pytestmark = pytest.mark.timeout(150)


async def test_three_nodes_under_faults_lose_nothing_and_agree(
    spawn_server: Spawn, own_pg: ThrowawayPostgres
) -> None:
    report = await run_faults(spawn_server, own_pg, writers_per_node=2, phase_s=1.5, stop_s=10.0)
    assert report.acked > 100
    assert report.retries > 0  # the faults were felt: clients had to retry
    assert report.evictions > 0  # CRDTs left memory and came back under the faults
