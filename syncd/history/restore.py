"""Restore: the ordinary ops that take a CRDT's current state to an earlier one.

Theory of operation
-------------------
A restore is not a rewind. The type says which ops turn its current state
into the target state (``Crdt.restore_ops``), and those ops are applied
through the service like any client's (:meth:`CrdtService.apply_ops`):
permission-checked, durable, replicated, broadcast, with webhooks, and merged
with concurrent edits as CRDT ops are. They go in one request whatever their
count (not a client's ``MAX_BATCH_OPS``): all of them or none, so a restore
refused part way (a quota) can be sent again with its ``op_id``.

Its records carry ``restores``: the target seq (``to_seq``) and the last seq
of the state its ops were computed on (``until_seq``). The ops in between are
the ones it took back, all of them, whoever wrote them; a later revert leaves
those alone (syncd/revert.py), as it leaves the ops an earlier revert took
back, so that reverting a writer whose work a restore took back does not
take it back a second time. The restore's own ops are its caller's write.

With an ``op_id`` the ops carry ``<op_id>/<i>``; a restore whose first op id
the engine has seen already answers as the first did (:func:`repeated`), so a
client may retry one safely. A restore that changes nothing (the state is
already the target's) applies no op, and remembers its op_id all the same
(:func:`remember_no_op`): its retry after others wrote is a repeat, not a
restore that takes their writes back. Without one, on a store shared by nodes, the
ops carry one derived from what they were computed on (:func:`derived_op_id`),
so that the same restore taken by two nodes at once is applied once.

A type that cannot be restored (``RESTORABLE`` False) refuses with its own
reason where it has one (its ``restore_ops`` raises), else 409
``not_restorable`` (:func:`check_restorable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from syncd.crdt.types import crdt_class
from syncd.errors import not_restorable

if TYPE_CHECKING:
    from syncd.auth.authenticator import Principal
    from syncd.crdt.base import Crdt
    from syncd.crdt.engine import Engine, Entry
    from syncd.service import CrdtService
    from syncd.store.base import Record


def check_restorable(entry: Entry) -> None:
    """Raise when the CRDT's type cannot be restored."""
    if not crdt_class(entry.type).RESTORABLE:
        entry.crdt.restore_ops(entry.crdt)  # raises with the type's reason
        raise not_restorable(f"{entry.type} cannot be restored")


NO_OP_RESTORED: Final = "restored"
"""The answer extra under which a restore that applied nothing remembers the
seq it restored (:func:`remember_no_op`): it has no record whose mark says."""


def remember_no_op(
    engine: Engine, entry: Entry, op_id: str, seq: int, extra: dict[str, Any]
) -> None:
    """Remember ``op_id`` for a restore or a revert that applied nothing,
    answered at ``seq``: as ``<op_id>/0`` of that seq, so that its retry is
    a repeat (:func:`repeated`, ``RevertService``) answered as the first was.
    A retry after others wrote would otherwise be a new request computed on
    their writes: a restore taking them back, a revert taking back the
    writer's newer ops, though the first was answered.

    Held in memory only: op_ids reach the log, other nodes and a restart
    through their ops' records, and the store has no record that changes
    nothing. So it lasts while the CRDT stays in this node's memory (a snapshot taken meanwhile keeps it); a
    restart, an eviction, or a retry sent to another node of a PostgreSQL
    cluster finds it gone, and the retry is a new request. Remembered under
    the engine's own op_id window and TTL, as an applied op's id is."""
    engine.remember_op_id(entry, f"{op_id}/0", seq, extra)


def repeated(entry: Entry, op_id: str | None) -> tuple[int, int, int | None] | None:
    """The seqs of the first and the last op of a restore with this
    ``op_id`` applied already (the last one still remembered), and the seq a
    restore that applied nothing restored (:data:`NO_OP_RESTORED`, else
    None), or None."""
    if op_id is None:
        return None
    first = entry.op_ids.get(f"{op_id}/0")
    if first is None:
        return None
    # The first answered the seq of its last op: the last one still remembered.
    i, last = 0, 0
    while (seen := entry.op_ids.get(f"{op_id}/{i}")) is not None:
        i, last = i + 1, seen[0]
    noted = first[1].get(NO_OP_RESTORED)
    return first[0], last, noted if isinstance(noted, int) else None


def repeat_answer(last: int, restored: int) -> dict[str, Any]:
    """What a repeat is answered: the first's seq and the seq it restored."""
    return {"ok": True, "seq": last, "restored": restored, "duplicate": True}


def restored_by(record: Record | None, asked: int) -> int:
    """The seq the restore whose first op is ``record`` restored: its mark's
    ``to_seq``. ``asked`` (the repeat's own) when the record is not retained
    or carries no mark (the op_id was first used by other ops)."""
    mark = record.get("restores") if record is not None else None
    if isinstance(mark, dict) and isinstance(mark.get("to_seq"), int):
        return int(mark["to_seq"])
    return asked


async def apply_restore(
    service: CrdtService,
    entry: Entry,
    target: Crdt,
    seq: int,
    principal: Principal,
    op_id: str | None,
    source: str,
) -> dict[str, Any]:
    """Apply, as ``principal``, the ops that take ``entry`` (the CRDT now) to
    ``target`` (its state at ``seq``); the restore's answer."""
    ops = entry.crdt.restore_ops(target)
    if not ops:
        if op_id is not None:
            remember_no_op(service.engine, entry, op_id, entry.seq, {NO_OP_RESTORED: seq})
        return {"ok": True, "seq": entry.seq, "applied": 0, "restored": seq}
    if op_id is None and not service.stages:
        # Several nodes may take the same restore at once (a client's retry
        # sent to another node): both compute the same ops on the same state,
        # and both applied them (a counter at 8 restored to 3 ended at -2).
        # An op_id of what they are computed from makes the second to commit
        # a repeat; one computed on a later state has another.
        op_id = derived_op_id(entry.epoch, entry.seq, seq)
    if op_id is not None:
        ops = [{**op, "op_id": f"{op_id}/{i}"} for i, op in enumerate(ops)]
    # What the ops take back: every op after ``seq`` up to the one the state
    # they were computed on ends at (ops applied after that are concurrent to
    # them, and stay). A later revert leaves those ops alone (syncd/revert.py).
    mark = {"restores": {"to_seq": seq, "until_seq": entry.seq}}
    # One request, so one commit, whatever the count (not a client's
    # MAX_BATCH_OPS), as a revert's: an op refused part way (a quota) leaves
    # none of them applied, and the same request again, op_id and all,
    # applies them whole instead of answering a repeat of a part.
    result = await service.apply_ops(
        entry.ns, entry.id, ops, principal, source, marks=mark, most=len(ops)
    )
    if result.duplicate and not result.records:
        # Another node applied the same restore first (its op ids met under
        # the CRDT's row lock): answered as a repeat noticed before is.
        return repeat_answer(result.seq, seq)
    return {"ok": True, "seq": result.seq, "applied": result.applied, "restored": seq}


def derived_op_id(epoch: str, computed_at: int, to_seq: int) -> str:
    """The op_id of a restore sent without one, on a store shared by nodes
    (a node runs a CRDT's ops one after the other, and a restore after
    another computes on its ops): the life, the seq of the state its ops were
    computed on, and the seq it restores to. Unlike a client's, never
    checked before the ops are computed: only the engine's check under the
    CRDT's row lock meets it."""
    return f"restore:{epoch}:{computed_at}:{to_seq}"
