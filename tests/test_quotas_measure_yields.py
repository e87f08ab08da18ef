"""The background measure of unmeasured CRDT sizes (syncd/quotas.py) yields
the event loop on every CRDT, those it cannot read included: a store full of
damaged CRDTs must not stall every request (and signal) for seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from syncd.crdt.engine import Engine
from syncd.quotas import MEASURE_WARNINGS, measure_unmeasured
from syncd.store.embedded.log import HEADER, LENGTH_MASK
from syncd.store.embedded.store import FileStore
from tests.store.conftest import MakeStore, make_store
from tests.store.embedded.test_hint import NS, Writer

__all__ = ["make_store"]  # the fixture

CRDTS = 600


def damage_every_frame(history: Path, only: Callable[[str], bool] = lambda _: True) -> int:
    """Flip a byte in the body of every history frame (of the CRDTs ``only``
    picks); the frames damaged."""
    flipped = 0
    for segment in sorted(history.glob("*.hist")):
        data = bytearray(segment.read_bytes())
        off = 0
        while off + HEADER.size <= len(data):
            word, _, _ = HEADER.unpack_from(data, off)
            end = off + HEADER.size + (word & LENGTH_MASK)
            record = msgpack.unpackb(bytes(data[off + HEADER.size : end]), strict_map_key=False)
            if record.get("id", "").startswith("gc:") and only(record["id"]):
                data[end - 1] ^= 0x40
                flipped += 1
            off = end
        segment.write_bytes(bytes(data))
    return flipped


async def unmeasured_store(
    make_store: MakeStore, data: Path, damaged: Callable[[str], bool] = lambda _: True
) -> FileStore:
    """A store of CRDTS CRDTs of unknown size, those ``damaged`` picks unreadable."""
    store, _ = await make_store(data, fsync="never")
    writer = Writer(store)
    for c in range(CRDTS):  # sizes never noted: the hint keeps them unmeasured
        await writer.op(f"gc:{c}", {"op": "increment"})
    await store.close()
    assert damage_every_frame(data / "history", damaged) >= 1
    store, _ = await make_store(data)  # the hint: no frame is read at the start
    return store  # type: ignore[no-any-return]


async def test_unreadable_crdts_do_not_block_the_loop(
    make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await unmeasured_store(make_store, tmp_path / "data")
    assert store.usage_now(NS).unmeasured == CRDTS
    assert len(store.unmeasured(CRDTS + 1)) == CRDTS

    steps = 0
    done = False

    async def ticker() -> None:
        nonlocal steps
        while not done:
            steps += 1
            await asyncio.sleep(0)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="syncd"):
        measured = await measure_unmeasured(store, Engine())
    done = True
    await tick
    assert measured == 0
    assert store.usage_now(NS).unmeasured == CRDTS  # still counted as unmeasured
    # One loop step per CRDT at least: another task ran between any two loads.
    assert steps >= CRDTS, f"the loop ran other tasks {steps} times over {CRDTS} failed loads"
    # A few named, the rest counted: not one warning per damaged CRDT.
    lines = [r.getMessage() for r in caplog.records if r.name == "syncd.quotas"]
    assert len(lines) == MEASURE_WARNINGS + 1, lines[:3]
    assert lines[-1].startswith(f"{CRDTS} CRDTs could not be measured")


async def test_the_readable_crdts_are_measured_around_unreadable_ones(
    make_store: MakeStore, tmp_path: Path
) -> None:
    def damaged(crdt_id: str) -> bool:
        return int(crdt_id[3:]) % 3 == 0

    store = await unmeasured_store(make_store, tmp_path / "data", damaged)
    unreadable = sum(1 for c in range(CRDTS) if damaged(f"gc:{c}"))
    assert await measure_unmeasured(store, Engine()) == CRDTS - unreadable
    usage = store.usage_now(NS)
    assert (usage.crdts, usage.unmeasured) == (CRDTS, unreadable)
    assert sorted(store.unmeasured(CRDTS)) == sorted(
        (NS, f"gc:{c}") for c in range(CRDTS) if damaged(f"gc:{c}")
    )
