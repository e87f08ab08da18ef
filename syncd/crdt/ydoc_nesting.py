"""How deep the JSON values of a Yjs update nest, read without Yrs; and
how deep its types would nest in a document (:class:`TypeDepths`).

Yrs decodes a value of a Yjs update (lib0's ``Any``: what a client sets in a
map or pushes to an array) by recursion on the native stack, where no
RecursionError stops it: arrays in arrays 30,000 deep, an update of 60 KB,
overflowed 8 MiB in ``get_state`` and the server died of SIGSEGV on the
write. This walks an update (v1 encoding) the way Yrs reads it, without
recursion, and says whether a value in it nests past a bound, so that the
update can be refused before Yrs sees it.

It reads only what it must to find the values. Anything it does not read
as an update (malformed, truncated, a content kind it does not know) is
"not too deep": Yrs then reads it and refuses it, as before.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import pairwise
from typing import Final, NamedTuple

MAX_VALUE_DEPTH: Final = 4096
"""Levels of arrays and objects (the value the first) a value of an update
may nest. Far past what a client's data nests (a root's JSON view holds 256,
syncd.crdt.ydoc.MAX_VIEW_DEPTH), and far below the ~20,000 that Yrs's
recursion overflows a thread's 8 MiB stack with."""

_ANY_ARRAY: Final = 117
_ANY_OBJECT: Final = 118


class _Reader:
    """lib0's reads over ``data``; IndexError past its end."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def var_uint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 70:
                raise ValueError("var-uint too long")

    def skip_var_int(self) -> None:
        while self.byte() & 0x80:
            pass

    def skip(self, count: int) -> None:
        end = self.pos + count
        if end > len(self.data):
            raise IndexError(end)
        self.pos = end

    def skip_buffer(self) -> None:
        """A var-string or a var-uint8-array: its length, then its bytes."""
        self.skip(self.var_uint())


def too_deep(update: bytes, most: int = MAX_VALUE_DEPTH) -> bool:
    """Whether a value in ``update`` (a Yjs update, v1 encoding) nests deeper
    than ``most`` levels; False for an update it does not read. Not walked
    (about 1 us a struct, five times Yrs's decode) when it cannot hold one:
    each level takes two bytes at least, its tag and its length, and holds
    an array's or an object's tag byte (counted in C, 1 ms a MiB)."""
    if len(update) < 2 * most:
        return False
    if update.count(_ANY_ARRAY) + update.count(_ANY_OBJECT) <= most:
        return False
    try:
        return _structs_too_deep(_Reader(update), most)
    except (IndexError, ValueError):
        return False


def _structs_too_deep(reader: _Reader, most: int) -> bool:
    for _ in range(reader.var_uint()):  # clients
        structs = reader.var_uint()
        reader.var_uint()  # client
        reader.var_uint()  # first clock
        for _ in range(structs):
            info = reader.byte()
            ref = info & 0x1F
            if ref in (0, 10):  # GC, Skip: a length
                reader.var_uint()
                continue
            if info & 0x80:  # origin id
                reader.var_uint()
                reader.var_uint()
            if info & 0x40:  # right origin id
                reader.var_uint()
                reader.var_uint()
            if not info & 0xC0:  # no origins: the parent
                if reader.var_uint() == 1:
                    reader.skip_buffer()  # a root's name
                else:
                    reader.var_uint()  # an item's id
                    reader.var_uint()
                if info & 0x20:
                    reader.skip_buffer()  # the key in a map
            if _content_too_deep(reader, ref, most):
                return True
    return False


def _content_too_deep(reader: _Reader, ref: int, most: int) -> bool:
    if ref == 1:  # deleted: a length
        reader.var_uint()
    elif ref == 2:  # JSON: strings
        for _ in range(reader.var_uint()):
            reader.skip_buffer()
    elif ref in (3, 4, 5):  # binary, string, embed
        reader.skip_buffer()
    elif ref == 6:  # format: key and value
        reader.skip_buffer()
        reader.skip_buffer()
    elif ref == 7:  # a type; an XML element's or hook's name
        if reader.var_uint() in (3, 5):
            reader.skip_buffer()
    elif ref == 8:  # values
        for _ in range(reader.var_uint()):
            if _value_too_deep(reader, most):
                return True
    elif ref == 9:  # a subdocument: its guid, its options
        reader.skip_buffer()
        return _value_too_deep(reader, most)
    else:
        raise ValueError(f"content {ref}")
    return False


def _value_too_deep(reader: _Reader, most: int) -> bool:
    """Reads one lib0 ``Any``; whether it nests deeper than ``most``. A stack
    of the arrays and objects open around the value read next: how many
    values each has left, and whether it is an object (a key before each)."""
    open_: list[list[int]] = []
    while True:
        tag = reader.byte()
        if tag in (_ANY_ARRAY, _ANY_OBJECT):
            count = reader.var_uint()
            if len(open_) >= most:
                return True
            open_.append([count, tag == _ANY_OBJECT])
        elif tag == 125:  # integer
            reader.skip_var_int()
        elif tag == 124:  # float32
            reader.skip(4)
        elif tag in (123, 122):  # float64, bigint
            reader.skip(8)
        elif tag in (119, 116):  # string, binary
            reader.skip_buffer()
        elif tag not in (127, 126, 121, 120):  # undefined, null, false, true
            raise ValueError(f"value tag {tag}")
        while open_ and open_[-1][0] == 0:
            open_.pop()
        if not open_:
            return False
        open_[-1][0] -= 1
        if open_[-1][1]:
            reader.skip_buffer()  # the entry's key


MAX_TYPE_DEPTH: Final = 4096
"""Levels of Yjs types (maps, arrays, texts, XML) nested in one another that
a document may hold, a root's children the first. Yrs deletes a type's
children by recursion on the native stack: XML elements nested 40,000 deep
(a 343 KB update, taken as a normal write) made a 6-byte update deleting
the top one kill the server (SIGSEGV); 20,000 did not. The same bound as
:data:`MAX_VALUE_DEPTH` and a read's ``MAX_XML_DEPTH``."""

_ROOT: Final = 0
_PARENT: Final = 1
_ORIGIN: Final = 2
_UNKNOWN: Final = -2
"""The level of an item whose parent or origin is not in the document yet."""

Struct = tuple[int, int, int, int, int, int, bool]
"""An item of an update: client, first and end clock, the kind of its
reference (root, parent, origin), the referenced id, whether it is a type."""


class Levels(NamedTuple):
    """What :meth:`TypeDepths.deepest` read of an update."""

    deepest: int
    """The deepest level a type of it would nest at; 0: it has none."""
    runs: list[tuple[int, int, int, int]]
    """Its items' levels: client, first and end clock, level."""
    waiting: list[Struct]
    """Items whose level waits for an item not in the document yet."""


class TypeDepths:
    """How deep each item of a document sits: the level of the type it is in
    (a root's items 0), by item id. An update alone cannot say how deep its
    types nest (an item's parent, or its origin, can be an item of the
    document), so a document keeps this beside itself and :meth:`deepest`
    reads an update against it. Kept as runs of clocks at one level, per
    client: a client typing into one paragraph adds to one run."""

    __slots__ = ("_runs", "_waiting")

    def __init__(self) -> None:
        self._runs: dict[int, tuple[list[int], list[int], list[int]]] = {}
        """client -> (starts, ends, levels), sorted by start, not overlapping."""
        self._waiting: list[Struct] = []
        """Items that refer to an item not in the document yet: Yrs holds
        them as pending. Read again with each update, so that the one that
        lets them in is refused if they then nest too deep; bounded as
        what Yrs holds is (the quotas count it)."""

    def copy(self) -> TypeDepths:
        copy = TypeDepths()
        copy._runs = {
            client: (starts[:], ends[:], levels[:])
            for client, (starts, ends, levels) in self._runs.items()
        }
        copy._waiting = self._waiting[:]
        return copy

    def level(self, client: int, clock: int) -> int | None:
        runs = self._runs.get(client)
        if runs is None:
            return None
        starts, ends, levels = runs
        at = bisect_right(starts, clock) - 1
        if at < 0 or clock >= ends[at]:
            return None
        return levels[at]

    def _add(self, client: int, start: int, end: int, level: int) -> None:
        runs = self._runs.get(client)
        if runs is None:
            self._runs[client] = ([start], [end], [level])
            return
        starts, ends, levels = runs
        if start >= ends[-1]:  # the usual case: a client's next items
            if start == ends[-1] and levels[-1] == level:
                ends[-1] = end
            else:
                starts.append(start)
                ends.append(end)
                levels.append(level)
            return
        at = bisect_right(starts, start)
        if (at and start < ends[at - 1]) or (at < len(starts) and end > starts[at]):
            return  # items it has (an update sent again): their levels stand
        starts.insert(at, start)
        ends.insert(at, end)
        levels.insert(at, level)

    def deepest(self, update: bytes) -> Levels:
        """What ``update`` would nest, read with the items still waiting, to
        :meth:`record` once it is applied. Nothing for an update it does not
        read (Yrs refuses it)."""
        try:
            structs = _item_structs(_Reader(update))
        except (IndexError, ValueError):
            return Levels(0, [], self._waiting)
        return self._resolve([*self._waiting, *structs] if self._waiting else structs)

    def record(self, levels: Levels) -> None:
        for client, start, end, level in levels.runs:
            self._add(client, start, end, level)
        self._waiting = levels.waiting

    def _resolve(self, structs: list[Struct]) -> Levels:
        if len(structs) == 1:  # the usual update (a keystroke): nothing to index
            client, start, end, kind, ref_client, ref_clock, is_type = structs[0]
            level = 0
            if kind != _ROOT:
                known = self.level(ref_client, ref_clock)
                if known is None:
                    return Levels(0, [], structs)
                level = known + (kind == _PARENT)
            return Levels(level + 1 if is_type else 0, [(client, start, end, level)], [])
        # Index of the update's own items, to find a reference among them.
        own: dict[int, tuple[list[int], list[int]]] = {}
        for index, (client, start, _, _, _, _, _) in enumerate(structs):
            starts_idx = own.setdefault(client, ([], []))
            starts_idx[0].append(start)
            starts_idx[1].append(index)
        for starts, indexes in own.values():
            if any(a > b for a, b in pairwise(starts)):
                pairs = sorted(zip(starts, indexes, strict=True))
                starts[:] = [p[0] for p in pairs]
                indexes[:] = [p[1] for p in pairs]

        def find(client: int, clock: int) -> int | None:
            entry = own.get(client)
            if entry is None:
                return None
            at = bisect_right(entry[0], clock) - 1
            if at < 0:
                return None
            index = entry[1][at]
            if clock >= structs[index][2]:
                return None
            return index

        levels: list[int | None] = [None] * len(structs)
        deepest = 0
        for first in range(len(structs)):
            if levels[first] is not None:
                continue
            stack = [first]
            levels[first] = -1  # being resolved (a cycle: malformed, level 0)
            while stack:
                index = stack[-1]
                _, _, _, kind, ref_client, ref_clock, _ = structs[index]
                if kind == _ROOT:
                    level = 0
                else:
                    found = find(ref_client, ref_clock)
                    if found is not None:
                        base = levels[found]
                        if base is None:
                            levels[found] = -1
                            stack.append(found)
                            continue
                        if base == -1:
                            base = 0  # a cycle: malformed (Yrs refuses it)
                    else:
                        base = self.level(ref_client, ref_clock)
                        if base is None:
                            base = _UNKNOWN  # not in the document yet: it waits
                    level = base if base == _UNKNOWN or kind != _PARENT else base + 1
                levels[index] = level
                if structs[index][6] and level + 1 > deepest:
                    deepest = level + 1
                stack.pop()
        runs: list[tuple[int, int, int, int]] = []
        waiting: list[Struct] = []
        for struct, found_level in zip(structs, levels, strict=True):
            if found_level == _UNKNOWN:
                waiting.append(struct)
            else:
                runs.append((struct[0], struct[1], struct[2], max(found_level or 0, 0)))
        if len(waiting) > 1:  # once each: an update sent again adds none
            waiting = list(dict.fromkeys(waiting))
        return Levels(deepest, runs, waiting)


def _item_structs(reader: _Reader) -> list[Struct]:
    """The items of an update: (client, start, end, reference kind, the
    referenced id's client and clock, whether it is a type)."""
    out: list[Struct] = []
    for _ in range(reader.var_uint()):  # clients
        structs = reader.var_uint()
        client = reader.var_uint()
        clock = reader.var_uint()
        for _ in range(structs):
            info = reader.byte()
            ref = info & 0x1F
            if ref in (0, 10):  # GC, Skip: a length, no parent
                length = reader.var_uint()
                if ref == 0:  # what refers to a collected item is collected too
                    out.append((client, clock, clock + length, _ROOT, 0, 0, False))
                clock += length
                continue
            kind, ref_client, ref_clock = _ROOT, 0, 0
            if info & 0x80:  # origin id: the same parent
                kind = _ORIGIN
                ref_client = reader.var_uint()
                ref_clock = reader.var_uint()
            if info & 0x40:  # right origin id: the same parent
                right_client = reader.var_uint()
                right_clock = reader.var_uint()
                if kind == _ROOT:
                    kind, ref_client, ref_clock = _ORIGIN, right_client, right_clock
            if not info & 0xC0:  # no origins: the parent
                if reader.var_uint() == 1:
                    reader.skip_buffer()  # a root's name
                else:
                    kind = _PARENT
                    ref_client = reader.var_uint()
                    ref_clock = reader.var_uint()
                if info & 0x20:
                    reader.skip_buffer()  # the key in a map
            length = _content_length(reader, ref)
            out.append((client, clock, clock + length, kind, ref_client, ref_clock, ref == 7))
            clock += length
    return out


def _content_length(reader: _Reader, ref: int) -> int:
    """Reads an item's content; its length in clocks."""
    if ref == 1:  # deleted: a length
        return reader.var_uint()
    if ref == 2:  # JSON: strings
        count = reader.var_uint()
        for _ in range(count):
            reader.skip_buffer()
        return count
    if ref == 4:  # a string: its length in UTF-16 code units
        size = reader.var_uint()
        start = reader.pos
        reader.skip(size)
        raw = reader.data[start : reader.pos]
        if raw.isascii():
            return size
        text = raw.decode("utf-8", "surrogatepass")
        return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)
    if ref == 8:  # values
        count = reader.var_uint()
        for _ in range(count):
            _value_too_deep(reader, 1 << 30)
        return count
    _content_too_deep(reader, ref, 1 << 30)
    return 1
