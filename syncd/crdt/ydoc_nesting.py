"""How deep the JSON values of a Yjs update nest, read without Yrs.

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

from typing import Final

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
