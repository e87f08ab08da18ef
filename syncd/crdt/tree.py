"""A replicated tree with the move operation of Kleppmann et al. (2021),
"A highly-available move operation for replicated trees".

Every op (add, move, update, delete) carries a timestamp ``ts = [counter,
client_id]``: ``counter`` is a Lamport counter kept by the tree (one more than
the highest counter seen), so at the server, which applies ops one at a time,
the counters are 1, 2, 3, … in seq order, and the total order of ``ts`` is the
server's order.

A replica keeps a log of ops sorted by ``ts``, each with the records it
overwrote. When a delta arrives out of order it undoes the log entries with a
later ``ts``, applies the new op, and redoes them (undo-do-redo); the tree is
therefore always the replay of every op it holds in ``ts`` order. Replay skips,
deterministically, an op that cannot apply at its place in the order: a move
that would make a cycle, an op on a node or under a parent that is not there.
The server refuses those ops outright (409 ``cycle`` / 400 ``invalid_op``), so
a replay of the complete history skips nothing and equals the server's tree.

Bounding the log: because the server hands out every counter exactly once and
without gaps, a replica that holds every op up to counter ``upto`` will never
receive an op at or below ``upto`` again, so it never has to undo past it (the
ops are causally stable). Log entries at or below ``upto`` are dropped. The
server and every replica that applies deltas in seq order keep an empty log;
only deltas received past a gap wait in it, and ``state()`` carries just those.

Deleting a node removes it and its subtree from the state; the log entry (while
it lasts) holds the removed records so the delete can be undone and redone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Self

from syncd.crdt.base import JSON, Base, OpContext, Step
from syncd.crdt.validate import (
    MAX_ELEMENT_BYTES,
    check_fields,
    json_object,
    op_fields,
    op_name,
    required,
    shown_json,
    str_field,
)
from syncd.errors import cycle, invalid_op

FIELDS = {
    "add": op_fields("id", "parent", "pos", "data"),
    "move": op_fields("id", "parent", "pos"),
    "update": op_fields("id", "data"),
    "delete": op_fields("id"),
}
"""The fields of each op (docs/data-model.md#tree)."""

ROOT = "root"
"""The implicit root node: always present, never moved or deleted."""

MAX_NODE_ID_LEN = 256
"""Node ids are names, as long as CRDT ids may be (docs/data-model.md#identifiers)."""

MAX_POS_LEN = 1024
"""Sort keys (fractional indexes grow with repeated inserts between neighbours)."""

MAX_DATA_BYTES = MAX_ELEMENT_BYTES
"""A node's data as canonical JSON, the same bound as set elements."""

MAX_TREE_DEPTH = 128
"""How deep a node may sit below the root. The read view nests two JSON levels
per tree level; this keeps a view (plus node data) encodable within the
interpreter's recursion limit."""

Stamp = tuple[int, int]
Node = tuple[str | None, str | None, dict[str, Any]]
"""``(parent, pos, data)``; only the root has parent None."""
Undo = list[tuple[str, Node | None]]
"""The records an op overwrote, in the order it overwrote them (None: absent)."""


class _LogEntry:
    __slots__ = ("op", "ts", "undo")

    def __init__(self, ts: Stamp, op: Mapping[str, Any], undo: Undo) -> None:
        self.ts = ts
        self.op = op
        self.undo = undo


def _stamp(delta: Mapping[str, Any]) -> Stamp:
    counter, client_id = delta["ts"]
    return (counter, client_id)


class Tree:
    TYPE: ClassVar[str] = "tree"
    OPS: ClassVar[Mapping[str, int]] = {"add": 0x01, "move": 0x02, "update": 0x04, "delete": 0x08}
    PREFIX: ClassVar[str] = "tr:"
    DISCONNECT_OP: ClassVar[Mapping[str, Any] | None] = None
    RESTORABLE: ClassVar[bool] = True
    REVERTIBLE: ClassVar[bool] = True
    REVERT_BASE: ClassVar[bool] = True

    __slots__ = ("_children", "_heights", "_kid_heights", "_log", "_nodes", "_pending", "_upto")

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {ROOT: (None, None, {})}
        self._children: dict[str, set[str]] = {}
        """parent id -> child ids (an index over ``_nodes``)."""
        self._heights: dict[str, int] = {}
        """id -> levels below it (absent: none, a leaf). Kept as children come
        and go, so that a move checks the depth it makes without walking the
        subtree it carries (a batch of moves of a large subtree held the loop)."""
        self._kid_heights: dict[str, dict[int, int]] = {}
        """parent id -> {a child's height + 1: how many children have it}."""
        self._upto = 0
        """Every op with counter 1 … upto has been applied."""
        self._log: list[_LogEntry] = []
        """Applied ops with counter > upto, sorted by ts."""
        self._pending: set[int] = set()
        """The counters in ``_log``."""

    @classmethod
    def new(cls) -> Self:
        return cls()

    # -- the server's path ------------------------------------------------

    def apply_op(self, op: Mapping[str, Any], ctx: OpContext) -> dict[str, Any]:
        name = op_name(op, self.OPS, self.TYPE)
        check_fields(op, FIELDS[name])
        node_id = str_field(op, "id", MAX_NODE_ID_LEN)
        assert node_id is not None
        delta: dict[str, Any] = {"op": name, "id": node_id}
        if name == "add":
            if node_id in self._nodes:
                raise invalid_op(f"id: node {node_id!r} already exists")
            parent = self._parent_field(op, default=ROOT)
            pos = str_field(op, "pos", MAX_POS_LEN, required=False)
            data = op.get("data")
            if data is None:
                data = {}
            else:
                json_object(data, "data", MAX_DATA_BYTES)
            self._check_depth(parent, 0)
            delta.update(parent=parent, data=data)
            if pos is not None:
                delta["pos"] = pos
        elif name == "move":
            self._known(node_id)
            if node_id == ROOT:
                raise invalid_op("id: the root cannot be moved")
            parent = self._parent_field(op, default=None)
            pos = str_field(op, "pos", MAX_POS_LEN, required=False)
            if self._is_ancestor(node_id, parent):
                raise cycle(f"parent: moving {node_id!r} under {parent!r} would make a cycle")
            self._check_depth(parent, self._height(node_id))
            delta["parent"] = parent
            if pos is not None:
                delta["pos"] = pos
        elif name == "update":
            self._known(node_id)
            data = required(op, "data")
            json_object(data, "data", MAX_DATA_BYTES)
            delta["data"] = data
        else:
            self._known(node_id)
            if node_id == ROOT:
                raise invalid_op("id: the root cannot be deleted")
        delta["ts"] = [self.clock + 1, ctx.client_id]
        self.apply_delta(delta)
        return delta

    def _known(self, node_id: str) -> None:
        if node_id not in self._nodes:
            raise invalid_op(f"id: unknown node {node_id!r}")

    def _parent_field(self, op: Mapping[str, Any], default: str | None) -> str:
        if op.get("parent") is None and default is not None:
            return default
        parent = str_field(op, "parent", MAX_NODE_ID_LEN)
        assert parent is not None
        if parent not in self._nodes:
            raise invalid_op(f"parent: unknown node {parent!r}")
        return parent

    def _too_deep(self, delta: Mapping[str, Any]) -> bool:
        """Whether ``delta`` (an add or a move) would put a node deeper than
        :data:`MAX_TREE_DEPTH` in this tree, as :meth:`apply_op` refuses; an
        op that :meth:`_do` skips here anyway (an unknown node or parent, a
        cycle) is not."""
        name = delta["op"]
        if name != "add" and name != "move":
            return False
        node_id, parent = delta["id"], delta["parent"]
        nodes = self._nodes
        if parent not in nodes or self._is_ancestor(node_id, parent):
            return False
        height = self._height(node_id) if name == "move" and node_id in nodes else 0
        return self._depth(parent) + 1 + height > MAX_TREE_DEPTH

    def _check_depth(self, parent: str, height: int) -> None:
        if self._depth(parent) + 1 + height > MAX_TREE_DEPTH:
            raise invalid_op(f"parent: the tree would be deeper than {MAX_TREE_DEPTH} levels")

    # -- tree queries -----------------------------------------------------

    def _is_ancestor(self, ancestor: str, node_id: str | None) -> bool:
        """Whether ``ancestor`` is ``node_id`` or above it."""
        nodes = self._nodes
        while node_id is not None:
            if node_id == ancestor:
                return True
            node = nodes.get(node_id)
            if node is None:
                return False
            node_id = node[0]
        return False

    def _depth(self, node_id: str) -> int:
        depth = 0
        parent = self._nodes[node_id][0]
        while parent is not None:
            depth += 1
            parent = self._nodes[parent][0]
        return depth

    def _height(self, node_id: str) -> int:
        """Levels below ``node_id`` (0: a leaf)."""
        return self._heights.get(node_id, 0)

    def _count(self, parent: str, gone: int, came: int) -> None:
        """A child entry (a child's height + 1; 0: none) of ``parent`` goes
        and one comes; carry the heights that change up the ancestors."""
        heights, kid_heights, nodes = self._heights, self._kid_heights, self._nodes
        while True:
            counts = kid_heights.get(parent)
            if counts is None:
                counts = kid_heights[parent] = {}
            if gone:
                left = counts[gone] - 1
                if left:
                    counts[gone] = left
                else:
                    del counts[gone]
            if came:
                counts[came] = counts.get(came, 0) + 1
            before = heights.get(parent, 0)
            if came > before:
                after = came
            elif gone == before and gone not in counts:
                # The entry that made the height went: the next one does.
                after = max(counts) if counts else 0
            else:
                after = before
            if not counts:
                del kid_heights[parent]
            if after == before:
                return
            if after:
                heights[parent] = after
            else:
                del heights[parent]
            node = nodes.get(parent)
            if node is None or node[0] is None:
                return
            parent, gone, came = node[0], before + 1, after + 1

    def _subtree(self, node_id: str) -> list[str]:
        """``node_id`` and its descendants, parents before children."""
        out = [node_id]
        i = 0
        while i < len(out):
            out.extend(sorted(self._children.get(out[i], ())))
            i += 1
        return out

    @property
    def clock(self) -> int:
        """The highest counter seen."""
        return self._log[-1].ts[0] if self._log else self._upto

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._nodes

    def parent_of(self, node_id: str) -> str | None:
        return self._nodes[node_id][0]

    def node_ids(self) -> Iterator[str]:
        return iter(self._nodes)

    # -- replication: undo, do, redo --------------------------------------

    def apply_delta(self, delta: Mapping[str, Any]) -> None:
        ts = _stamp(delta)
        counter = ts[0]
        if counter <= self._upto or counter in self._pending:
            return
        log = self._log
        if not log and counter == self._upto + 1:
            # In order, nothing pending (the server, in-order replicas): apply, keep no log.
            self._do(delta)
            self._upto = counter
            return
        at = len(log)
        while at > 0 and log[at - 1].ts > ts:
            at -= 1
        later = log[at:]
        for entry in reversed(later):
            self._undo(entry.undo)
        entry = _LogEntry(ts, delta, self._do(delta))
        for other in later:
            other.undo = self._do(other.op)
        log.insert(at, entry)
        self._pending.add(counter)
        self._settle()

    def _settle(self) -> None:
        """Advance ``upto`` over contiguous counters and drop the stable log prefix."""
        pending = self._pending
        while self._upto + 1 in pending:
            self._upto += 1
            pending.discard(self._upto)
        stable = 0
        while stable < len(self._log) and self._log[stable].ts[0] <= self._upto:
            stable += 1
        if stable:
            del self._log[:stable]

    def _do(self, op: Mapping[str, Any]) -> Undo:
        """Apply ``op`` to the tree as it stands; return what it overwrote ([] = skipped)."""
        name = op["op"]
        node_id = op["id"]
        nodes = self._nodes
        node = nodes.get(node_id)
        if name == "add" or name == "move":
            parent = op["parent"]
            if node_id == ROOT or parent not in nodes or self._is_ancestor(node_id, parent):
                return []
            if name == "add":
                self._set(node_id, (parent, op.get("pos"), op.get("data") or {}))
            elif node is None:
                return []
            else:
                self._set(node_id, (parent, op.get("pos"), node[2]))
            return [(node_id, node)]
        if node is None:
            return []
        if name == "update":
            self._set(node_id, (node[0], node[1], op["data"]))
            return [(node_id, node)]
        if node_id == ROOT:
            return []
        undo: Undo = [(n, nodes[n]) for n in self._subtree(node_id)]
        for n, _ in reversed(undo):
            self._remove(n)
        return undo

    def _undo(self, undo: Undo) -> None:
        for node_id, old in reversed(undo):
            if old is None:
                self._remove(node_id)
            else:
                self._set(node_id, old)

    def _set(self, node_id: str, node: Node) -> None:
        old = self._nodes.get(node_id)
        if old is not None and old[0] != node[0] and old[0] is not None:
            self._unlink(old[0], node_id)
        self._nodes[node_id] = node
        parent = node[0]
        if parent is not None:
            siblings = self._children.setdefault(parent, set())
            if node_id not in siblings:
                siblings.add(node_id)
                self._count(parent, 0, self._heights.get(node_id, 0) + 1)

    def _remove(self, node_id: str) -> None:
        old = self._nodes.pop(node_id)
        if old[0] is not None:
            self._unlink(old[0], node_id)

    def _unlink(self, parent: str, node_id: str) -> None:
        siblings = self._children[parent]
        siblings.discard(node_id)
        if not siblings:
            del self._children[parent]
        self._count(parent, self._heights.get(node_id, 0) + 1, 0)

    def answer(self, delta: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    # -- restore ------------------------------------------------------------

    def restore_ops(self, target: Self) -> list[dict[str, Any]]:
        """In an order in which no op can be refused: nodes that must move go
        to the root first (no move there makes a cycle); nodes the target lacks
        are deleted (only the topmost: a delete takes its subtree); nodes it
        has and this tree lacks are added, parents first; the moved nodes go
        to their places, parents first; then data is set where it differs.
        A node deleted since comes back under its id with its data, but as a
        new node (its later ops stay deleted with it)."""
        mine, theirs = self._nodes, target._nodes
        ops: list[dict[str, Any]] = []
        moving = [
            n
            for n in sorted(mine.keys() & theirs.keys())
            if n != ROOT and mine[n][:2] != theirs[n][:2]
        ]
        ops += [{"op": "move", "id": n, "parent": ROOT} for n in moving if mine[n][0] != ROOT]
        parents = {n: (ROOT if n in moving else mine[n][0]) for n in mine}
        extra = mine.keys() - theirs.keys()
        ops += [{"op": "delete", "id": n} for n in sorted(extra) if parents[n] not in extra]
        order = sorted(theirs, key=lambda n: (target._depth(n), n))
        for n in order:
            if n not in mine:
                parent, pos, data = theirs[n]
                add: dict[str, Any] = {"op": "add", "id": n, "parent": parent, "data": data}
                if pos is not None:
                    add["pos"] = pos
                ops.append(add)
        moved = set(moving)
        for n in order:
            if n in moved:
                parent, pos, _ = theirs[n]
                move: dict[str, Any] = {"op": "move", "id": n, "parent": parent}
                if pos is not None:
                    move["pos"] = pos
                ops.append(move)
        for n in sorted(mine.keys() & theirs.keys()):
            # As the JSON a read shows, not as Python values (1 == 1.0 ==
            # True) nor as identities (1.0 is 1): a restore must bring back
            # the one the target had.
            if shown_json(mine[n][2]) != shown_json(theirs[n][2]):
                ops.append({"op": "update", "id": n, "data": theirs[n][2]})
        return ops

    # -- revert -------------------------------------------------------------

    def revert_ops(self, window: Sequence[Step], base: Base | None) -> list[dict[str, Any]]:
        """The tree as if the marked ops had not been made, except those a
        later unmarked op depends on, reached by :meth:`restore_ops`.

        The target is the base with the window's kept ops replayed in order,
        each skipped where it cannot apply (as replicas do). An unmarked op
        that gets skipped depended on a marked one (it moved a node under one
        that a marked op added, updated a node a marked move took out of a
        cycle's way, ...): the marked ops that touched its node or its parent
        before it are kept too, and the replay runs again, until no kept op
        is skipped or no marked op is left to keep. A kept marked op that is
        skipped depends in turn on the marked ops before it (an add under a
        node the writer added higher up): they are kept as for the others'.
        A move skipped as a cycle depends also on the marked moves of the
        nodes between it and its new parent (the writer lifted one of them,
        and what hung below it, out of the moved node's subtree).
        An add or move that would put a node deeper than
        :data:`MAX_TREE_DEPTH` there is skipped too (the server would refuse
        it, and so the restore's op that reaches it): it depended on the
        marked moves and deletes before it, which are all kept. Their adds, moves, updates and deletes are then
        undone where nothing depends on them."""
        if base is None:
            raise ValueError("a tree's revert reads the base")
        start = base.crdt()
        assert isinstance(start, Tree)
        kept = [not marked for _, marked in window]
        while True:
            target = start.clone()
            skipped: list[int] = []
            too_deep: list[int] = []
            # The nodes between a skipped move's node and its new parent,
            # below it there (a cycle), and the latest such move: a move of
            # the writer's of one of them before it took it out of the way
            # (the other writer moved a under c once the writer had lifted b,
            # with c, out of a), and stays.
            lifted: dict[str, int] = {}
            # A kept op of the writer's that is skipped counts as the others'
            # do: it is kept because they depend on it, and it depends in
            # turn on the writer's earlier ops on its node and parent (an add
            # under a node the writer added above). Left out, it was skipped,
            # the others' op with it, and the revert deleted their node.
            for i, (delta, _) in enumerate(window):
                if not kept[i]:
                    continue
                if target._too_deep(delta):
                    # The server refuses it there, so a restore's op to reach
                    # it would be refused too (400, part of the revert applied).
                    skipped.append(i)
                    too_deep.append(i)
                elif not target._do(delta):
                    skipped.append(i)
                    if delta["op"] == "move":
                        for n in target._cycle_path(delta["id"], delta["parent"]):
                            lifted[n] = i
            # The marked ops not kept that touched a skipped op's node or
            # parent before it. Found through the latest skipped op naming
            # each node, in one pass over the window: a scan of the window
            # before every skipped op was quadratic (thousands of others'
            # adds under a node the writer added took a minute).
            # An update or a delete names no parent: its None names no node
            # (it matched every earlier update and delete, so one dependent
            # update kept all of the writer's updates and deletes before it).
            # Nor does the root, always there and never moved: an op under it
            # is skipped only for want of its own node (it kept every add
            # under the root and every update of its data before it).
            reach: dict[str | None, int] = {}
            for i in skipped:
                delta = window[i][0]
                reach[delta["id"]] = i
                reach[delta.get("parent")] = i
            reach.pop(None, None)
            reach.pop(ROOT, None)
            # Deep only without the writer's earlier moves or deletes (one
            # lifted a subtree, or took nodes out of the one moved): where
            # they are is not known by ids, so every one before it stays.
            deep = max(too_deep, default=0)
            pins: set[int] = set()
            if reach or deep or lifted:
                for j in range(max(skipped, default=0)):
                    if kept[j]:
                        continue
                    earlier = window[j][0]
                    lifts = j < deep and earlier["op"] in ("move", "delete")
                    named = reach.get(earlier["id"], -1) > j
                    if earlier["op"] == "move" and lifted.get(earlier["id"], -1) > j:
                        named = True
                    if lifts or named or reach.get(earlier.get("parent"), -1) > j:
                        pins.add(j)
            if not pins:
                return self.restore_ops(target)
            for j in pins:
                kept[j] = True

    def _cycle_path(self, node_id: str, parent: str) -> list[str]:
        """The nodes from ``parent`` up to ``node_id``, without it, when
        ``node_id`` is above ``parent`` (a move of it there is a cycle); else
        none. At most :data:`MAX_TREE_DEPTH` of them."""
        if not self._is_ancestor(node_id, parent):
            return []
        path: list[str] = []
        at: str | None = parent
        while at is not None and at != node_id:
            path.append(at)
            at = self._nodes[at][0]
        return path

    # -- views and state --------------------------------------------------

    def view(self, now_ms: int) -> dict[str, Any]:
        nodes = self._nodes
        children = self._children
        root: dict[str, Any] = {"id": ROOT, "data": nodes[ROOT][2], "children": []}
        stack = [(ROOT, root)]
        while stack:
            node_id, out = stack.pop()
            kids = children.get(node_id)
            if not kids:
                continue
            for kid in sorted(kids, key=lambda k: (nodes[k][1] or "", k)):
                kid_out: dict[str, Any] = {"id": kid, "data": nodes[kid][2], "children": []}
                out["children"].append(kid_out)
                stack.append((kid, kid_out))
        return {"value": root}

    def state(self) -> JSON:
        return {
            "upto": self._upto,
            "nodes": {n: list(self._nodes[n]) for n in sorted(self._nodes)},
            "log": [
                {
                    "op": entry.op,
                    "undo": [[n, list(old) if old is not None else None] for n, old in entry.undo],
                }
                for entry in self._log
            ],
        }

    @classmethod
    def from_state(cls, state: JSON) -> Self:
        new = cls()
        new._nodes = {}
        for node_id, (parent, pos, data) in state["nodes"].items():
            new._set(node_id, (parent, pos, dict(data)))
        if ROOT not in new._nodes or new._nodes[ROOT][0] is not None:
            raise ValueError("tree state has no root")
        new._upto = int(state["upto"])
        for item in state["log"]:
            undo: Undo = [
                (n, (old[0], old[1], dict(old[2])) if old is not None else None)
                for n, old in item["undo"]
            ]
            entry = _LogEntry(_stamp(item["op"]), item["op"], undo)
            new._log.append(entry)
            new._pending.add(entry.ts[0])
        new._log.sort(key=lambda e: e.ts)
        return new

    def merge(self, other: Self) -> None:
        # Both sides replay the same server history. The side with the longer
        # stable prefix holds every op of the other's prefix; what the other may
        # add is only its pending log.
        if other._upto > self._upto:
            mine = [entry.op for entry in self._log]
            base = other.clone()
            self._nodes, self._children = base._nodes, base._children
            self._heights, self._kid_heights = base._heights, base._kid_heights
            self._upto, self._log, self._pending = base._upto, base._log, base._pending
        else:
            mine = []
        for op in mine + [entry.op for entry in other._log]:
            self.apply_delta(op)

    def clone(self) -> Self:
        new = type(self)()
        new._nodes = dict(self._nodes)
        new._children = {parent: set(kids) for parent, kids in self._children.items()}
        new._heights = dict(self._heights)
        new._kid_heights = {parent: dict(counts) for parent, counts in self._kid_heights.items()}
        new._upto = self._upto
        # Entries' undo lists are replaced on redo, never edited, so they can be shared.
        new._log = [_LogEntry(e.ts, e.op, e.undo) for e in self._log]
        new._pending = set(self._pending)
        return new
