"""``Replica.wait_for_seq`` waits within one life of the CRDT (its epoch).

A CRDT deleted and made anew starts its seqs again at 1, so a seq of the
old life meant nothing in the new one: a wait for seq 5 of the old life
returned once the new life's counter passed 5, and a wait for a seq the old
life never reached could only time out. The wait is in the life the replica
holds at the call (or the ``epoch=`` given) and fails with
:class:`EpochChangedError` when that life is over; against the real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from syncd.client import AsyncClient, ClientError, EpochChangedError
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer

WAIT_S = 10.0


@pytest.fixture
async def writer(server: RunningServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, make_token(1, admin=True), NS) as client:
        yield client


async def _increment(writer: AsyncClient, crdt_id: str, ops: int) -> tuple[int, str]:
    """``ops`` increments of ``crdt_id``; the seq and epoch after them (a
    write's answer names its epoch in the state it returns)."""
    answer = await writer.apply(crdt_id, [{"op": "increment"}] * ops, return_state=True)
    return answer["seq"], answer["state"]["epoch"]


async def _recreate(writer: AsyncClient, crdt_id: str, ops: int) -> str:
    """Delete ``crdt_id`` and make it anew with ``ops`` increments; its new epoch."""
    await writer.delete_crdt(crdt_id)
    seq, epoch = await _increment(writer, crdt_id, ops)
    assert seq == ops
    return epoch


async def test_a_wait_fails_when_the_life_ends(writer: AsyncClient) -> None:
    _, first = await _increment(writer, "gc:life", 2)
    async with await writer.replica("gc:life") as replica:
        assert (replica.seq, replica.epoch) == (2, first)
        waits = [
            asyncio.create_task(replica.wait_for_seq(5, WAIT_S)),
            asyncio.create_task(replica.wait_for_seq(5, WAIT_S, epoch=first)),
        ]
        await asyncio.sleep(0.05)
        second = await _recreate(writer, "gc:life", 6)  # the new life passes seq 5
        for wait in waits:
            with pytest.raises(EpochChangedError) as caught:
                await wait
            assert caught.value.expected == first
            assert isinstance(caught.value, ClientError)
        await replica.wait_for_seq(6, WAIT_S, epoch=second)
        assert (replica.seq, replica.epoch, replica.value) == (6, second, 6)
        # A life the replica saw end fails at once, whatever its seq.
        with pytest.raises(EpochChangedError):
            await replica.wait_for_seq(1, WAIT_S, epoch=first)


async def test_a_new_life_is_waited_for_while_the_replica_is_behind(writer: AsyncClient) -> None:
    """A replica still in the old life (it has not had the delete yet) waits
    for the new life's seq rather than failing."""
    await writer.gcounter_increment("gc:behind")
    async with await writer.replica("gc:behind") as replica:
        old = replica.epoch
        second = await _recreate(writer, "gc:behind", 3)
        assert second != old
        await replica.wait_for_seq(3, WAIT_S, epoch=second)
        assert (replica.seq, replica.epoch) == (3, second)


async def test_a_wait_begun_before_the_crdt_exists_takes_its_first_life(
    writer: AsyncClient,
) -> None:
    async with await writer.replica("gc:new") as replica:
        assert replica.epoch is None
        wait = asyncio.create_task(replica.wait_for_seq(2, WAIT_S))
        seq, epoch = await _increment(writer, "gc:new", 2)
        await wait
        assert (replica.seq, replica.epoch) == (seq, epoch)


async def test_a_wait_fails_when_the_crdt_is_deleted(writer: AsyncClient) -> None:
    _, epoch = await _increment(writer, "gc:gone", 1)
    async with await writer.replica("gc:gone") as replica:
        wait = asyncio.create_task(replica.wait_for_seq(9, WAIT_S, epoch=epoch))
        await asyncio.sleep(0.05)
        await writer.delete_crdt("gc:gone")
        with pytest.raises(EpochChangedError) as caught:
            await wait
        assert caught.value.epoch is None
