"""A restore larger than one batch (syncd/history/restore.py): its ops go
through the op path in batches of at most MAX_BATCH_OPS, all carry the
restore's op_id, and the same restore again changes nothing."""

from __future__ import annotations

from pathlib import Path

from syncd.app import App
from syncd.auth.authenticator import ROOT
from syncd.crdt.engine import MAX_BATCH_OPS
from syncd.store.history_index import Retention
from tests.conftest import base_settings

NS = "app"
ID = "or:big"


async def test_a_restore_of_more_than_one_batch(tmp_path: Path) -> None:
    extra = MAX_BATCH_OPS + MAX_BATCH_OPS // 2
    # Retention well past the ops made, so the state at seq 1 is still there.
    settings = base_settings(tmp_path / "data", history_retention=Retention(ops=10 * extra))
    app = App(settings)
    await app.start()
    try:
        await app.service.apply_ops(NS, ID, [{"op": "add", "element": "keep"}], ROOT, "http")
        for start in range(0, extra, MAX_BATCH_OPS // 2):
            adds = [
                {"op": "add", "element": f"e{i}"} for i in range(start, start + MAX_BATCH_OPS // 2)
            ]
            await app.service.apply_ops(NS, ID, adds, ROOT, "http")
        answer = await app.history.restore(NS, ID, 1, ROOT, "r1", "http")
        assert answer == {"ok": True, "seq": 1 + 2 * extra, "applied": extra, "restored": 1}
        now = await app.history.read_at(NS, ID, answer["seq"], full=False)
        assert now["value"] == ["keep"]
        page = await app.history.page(NS, ID, None, extra)
        assert {o["op_id"] for o in page["ops"]} == {f"r1/{i}" for i in range(extra)}
        again = await app.history.restore(NS, ID, 1, ROOT, "r1", "http")
        assert again["duplicate"] is True
        assert (await app.history.page(NS, ID, None, 1))["seq"] == answer["seq"]
    finally:
        await app.close()
