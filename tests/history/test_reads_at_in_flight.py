"""A read at a seq (``?at=``) whose op is still on its way to the disk shows
it only once it is durable (docs/protocol.md, "Reads show only durable
ops"). Before, ``?at=`` of the newest seq answered at once from memory, with
an op whose write then failed (answered 503, and gone after the rebuild):
a state that never was. Now it waits for the ops in flight, as a read does,
and a failed write leaves its seq in the future."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx

from tests.store.support import ENOSPC, gated_server
from tests.ws.support import NS, mint, wait_for

CRDTS = f"/v1/namespaces/{NS}/crdts"


async def test_a_read_at_a_seq_in_flight_waits_and_never_shows_a_failed_op(
    tmp_path: Path,
) -> None:
    async with gated_server(tmp_path / "data") as (server, faults):
        headers = {"authorization": f"Bearer {mint()}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
            r = await client.post(f"{CRDTS}/pn:c/ops", json={"op": "increment", "amount": 1})
            assert r.status_code == 200, r.text
            gate = faults.gate = threading.Event()
            faults.entered.clear()
            post = asyncio.create_task(
                client.post(f"{CRDTS}/pn:c/ops", json={"op": "increment", "amount": 100})
            )
            await wait_for(faults.entered.is_set)  # seq 2 applied, its write held
            reads = [
                asyncio.create_task(client.get(f"{CRDTS}/pn:c?at={at}{extra}"))
                for at in (2, 1)
                for extra in ("", "&format=crdt")
            ]
            await asyncio.sleep(0.2)
            assert not any(read.done() for read in reads), [
                read.result().text for read in reads if read.done()
            ]
            faults.write_errno = ENOSPC
            gate.set()
            assert (await post).status_code == 503
            faults.gate = None
            faults.write_errno = None
            answers = await asyncio.gather(*reads)
            for r in answers[:2]:  # seq 2 never was: in the future of the rebuilt CRDT
                assert r.status_code in (400, 503), r.text
                assert "101" not in r.text and "100" not in r.text, r.text
            for r in answers[2:]:
                assert r.status_code in (200, 503), r.text
