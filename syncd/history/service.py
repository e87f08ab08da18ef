"""The history service: what the routes and the revert call for a CRDT's past.

Theory of operation
-------------------
The store keeps the records and checkpoints (``store/history_index.py`` says what
and for how long); :class:`HistoryService` turns them into answers, for the
CRDT's current life (its entry in the engine, loaded on first use):

- :meth:`HistoryService.page`: retained ops, newest first, with a cursor,
  optionally only one writer's (``reads.py``);
- :meth:`HistoryService.state_at` (``?at=``): the newest checkpoint at or
  before the seq (never the beginning when a later one is retained) plus the
  op records after it, applied as deltas to a fresh replica of the type;
  :meth:`HistoryService.base_at` gives the same unbuilt, for a caller that
  reads it without building a replica (the revert);
- :meth:`HistoryService.restore`: the ops that take the current state to
  that one, applied through the service (``restore.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from syncd.crdt.base import Base
from syncd.crdt.engine import replica_state
from syncd.crdt.presence import Presence
from syncd.crdt.types import crdt_class
from syncd.errors import ApiError, bad_request, not_found
from syncd.history.reads import Writer, history_item, read_page
from syncd.history.restore import (
    apply_restore,
    check_restorable,
    repeat_answer,
    repeated,
    restored_by,
)

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal
    from syncd.crdt.base import Crdt
    from syncd.crdt.engine import Engine, Entry
    from syncd.service import CrdtService
    from syncd.store.base import Store


class HistoryService:
    def __init__(self, *, engine: Engine, store: Store, service: CrdtService) -> None:
        self._engine = engine
        self._store = store
        self._service = service

    async def _entry(self, ns: str, crdt_id: str) -> Entry:
        entry = await self._service.ensure(ns, crdt_id)
        if entry is None:
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return entry

    async def durable(self, ns: str, crdt_id: str) -> tuple[Entry, str, int]:
        """The CRDT with its epoch and the newest seq whose op is durable: what
        the store's history holds. Memory's seq also counts ops on their way
        to the disk, which the history holds only once they are durable (a
        read that named them answered 410, an empty page, or a revert that
        matched nothing, while the CRDT took writes); this waits for those
        in flight now (``CrdtService.durable_read``: while a local store is
        failing, what it holds, rather than wait for its recovery)."""

        def position() -> tuple[Entry, str, int] | None:
            entry = self._engine.get(ns, crdt_id)
            return None if entry is None else (entry, entry.epoch, entry.seq)

        taken = await self._service.durable_read(ns, crdt_id, position)
        if taken is None:
            raise not_found(f"no CRDT {crdt_id!r} in namespace {ns!r}")
        return taken

    async def type_of(self, ns: str, crdt_id: str) -> str:
        return (await self._entry(ns, crdt_id)).type

    async def page(
        self,
        ns: str,
        crdt_id: str,
        before: int | None,
        limit: int,
        writer: Writer | None = None,
    ) -> dict[str, Any]:
        """Retained ops below ``before``, newest first, at most ``limit``;
        with ``writer``, only that writer's (see ``reads.read_page``)."""
        entry, epoch, latest = await self.durable(ns, crdt_id)
        records, oldest, after = await read_page(
            self._store, ns, crdt_id, epoch, latest, before, limit, writer
        )
        await self._same_life(ns, crdt_id, epoch)
        return {
            "id": crdt_id,
            "type": entry.type,
            "epoch": epoch,
            "seq": latest,
            "oldest": oldest,
            "ops": [history_item(record) for record in records],
            "next": after,
        }

    async def _same_life(self, ns: str, crdt_id: str, epoch: str) -> None:
        """404 unless the CRDT is still in life ``epoch``: one deleted while
        its history was read has none left (the store answers that life's
        reads as if all of it had expired), and the answer would describe a
        life that is gone."""
        if (await self._entry(ns, crdt_id)).epoch != epoch:
            raise not_found(f"{ns}/{crdt_id} was deleted while its history was read")

    async def state_at(
        self, ns: str, crdt_id: str, seq: int, field: str = "at"
    ) -> tuple[Entry, Crdt]:
        """The CRDT right after op ``seq`` of its current life (a new object).
        Of its durable ops only: memory also holds the ops on their way to the
        disk, and a read of the newest seq answered from it at once showed
        one whose write could still fail (then gone, answered 503); this
        waits for them, as a read does (:meth:`durable`)."""
        entry = await self._entry(ns, crdt_id)
        if seq > entry.seq:
            raise bad_request(
                f"{field}: seq {seq} is in the future (the CRDT is at seq {entry.seq})"
            )
        entry, _, latest = await self.durable(ns, crdt_id)
        if seq > latest:  # its write failed: the CRDT was rebuilt without it
            raise bad_request(f"{field}: seq {seq} is in the future (the CRDT is at seq {latest})")
        if seq == entry.seq:  # nothing applied past it in memory
            return entry, entry.crdt.clone()
        now, base = await self.base_at(ns, crdt_id, seq)
        if now.epoch != entry.epoch:
            # Deleted (and created again) between the two reads: that base is
            # the new life's past, not the past of the life answered for.
            raise not_found(f"{ns}/{crdt_id} was deleted while its history was read")
        return entry, base.crdt()

    async def base_at(self, ns: str, crdt_id: str, seq: int) -> tuple[Entry, Base]:
        """What rebuilds the CRDT right after op ``seq`` (at most its current
        seq), unbuilt: the newest retained checkpoint at or before it and the
        deltas after it. 410 ``history_expired`` when ``seq`` is older than
        retained."""
        entry, epoch, latest = await self.durable(ns, crdt_id)
        try:
            checkpoint, records = await self._store.history_base(
                ns, crdt_id, epoch, latest, min(seq, latest)
            )
        except ApiError as error:
            # A life deleted while it was read has no history left: that is
            # 404, not 410 (as if the CRDT were there with less retained).
            if error.code == "history_expired":
                now = await self._entry(ns, crdt_id)
                if now.epoch != epoch:
                    message = f"{ns}/{crdt_id} was deleted while its history was read"
                    raise not_found(message) from error
            raise
        state = checkpoint["state"] if checkpoint is not None else None
        return entry, Base(crdt_class(entry.type), state, [record["op"] for record in records])

    async def read_at(self, ns: str, crdt_id: str, seq: int, *, full: bool) -> dict[str, Any]:
        """The read answer as it was right after op ``seq``."""
        entry, crdt = await self.state_at(ns, crdt_id, seq)
        head: dict[str, Any] = {"id": crdt_id, "type": entry.type, "seq": seq, "epoch": entry.epoch}
        if full:
            # What waited then, merged in: a replica loads it and applies the
            # op deltas after seq (syncd.crdt.engine.replica_state).
            head["state"] = replica_state(crdt)
        else:
            head.update(crdt.view(await self._time_of(ns, crdt_id, entry, seq, crdt)))
        return head

    async def _time_of(self, ns: str, crdt_id: str, entry: Entry, seq: int, crdt: Crdt) -> int:
        """The time a read right after op ``seq`` judged its view at: the
        op's own (its record's ``ts``). Only a presence view depends on the
        time (which entries were still live), so only it pays a history read:
        judged now, a presence read of the past would show everyone of that
        time as gone. The current time where the record is not retained (a
        seq of 0, or only a checkpoint kept at it)."""
        if not isinstance(crdt, Presence) or seq <= 0:
            return self._engine.now_ms()
        _, epoch, latest = await self.durable(ns, crdt_id)
        if epoch != entry.epoch or latest < seq:
            return self._engine.now_ms()  # deleted meanwhile: that life's ops are gone
        records, _ = await self._store.history(ns, crdt_id, epoch, latest, seq + 1, 1)
        if records and records[0]["seq"] == seq:
            return int(records[0]["ts"])
        return self._engine.now_ms()

    async def restore(
        self,
        ns: str,
        crdt_id: str,
        seq: int,
        principal: Principal,
        op_id: str | None,
        source: str,
    ) -> dict[str, Any]:
        """Apply the ops that make the current state equal the state at ``seq``."""
        entry = await self._entry(ns, crdt_id)
        check_restorable(entry)
        if seq > entry.seq:  # named as the restore's body names it, not as ?at=
            raise bad_request(f"seq: seq {seq} is in the future (the CRDT is at seq {entry.seq})")
        seen = repeated(entry, op_id)
        if seen is not None:
            return await self._repeat(ns, crdt_id, entry, seen, seq)
        read, target = await self.state_at(ns, crdt_id, seq, "seq")
        entry = await self._entry(ns, crdt_id)  # the current one, after the wait
        if entry.epoch != read.epoch:
            # Deleted (and perhaps created again) while the past was read: that
            # state is of a life that is gone, not one to bring into this one.
            raise not_found(f"{ns}/{crdt_id} was deleted during the restore")
        # Again: a first request with this op_id may have applied during the
        # read. Its ops computed now would be another restore's (more of them
        # when others wrote meanwhile), its first op ids repeats, the rest new.
        seen = repeated(entry, op_id)
        if seen is not None:
            return await self._repeat(ns, crdt_id, entry, seen, seq)
        return await apply_restore(self._service, entry, target, seq, principal, op_id, source)

    async def _repeat(
        self,
        ns: str,
        crdt_id: str,
        entry: Entry,
        seen: tuple[int, int, int | None],
        asked: int,
    ) -> dict[str, Any]:
        """The answer to a restore whose op_id was used already (``seen``:
        the seqs of its first and last op, and what a restore that applied
        nothing restored): the seq the first one restored, read off its first
        op's mark, not the one the repeat names (a repeat naming another seq
        was told a restore it never got was done)."""
        first, last, noted = seen
        if noted is not None:  # applied nothing: no record, no mark
            return repeat_answer(last, noted)
        record = None
        _, epoch, latest = await self.durable(ns, crdt_id)
        if epoch == entry.epoch and first <= latest:
            records, _ = await self._store.history(ns, crdt_id, epoch, latest, first + 1, 1)
            if records and records[0]["seq"] == first:
                record = records[0]
        return repeat_answer(last, restored_by(record, asked))
