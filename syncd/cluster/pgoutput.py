"""A decoder for the parts of PostgreSQL's ``pgoutput`` protocol we read (pure).

Logical replication sends one message per change; we need ``Relation``
(which table an oid is, and its column names) and ``Insert`` (the new row).
Every other message (Begin, Commit, Origin, Type, Update, Delete, Truncate,
logical Message) is skipped. Values arrive in binary form when the stream was
started with ``binary 'true'`` (PostgreSQL 14+; for bytea that is the raw
bytes) or as text (bytea then is ``\\x`` followed by hex).

Format: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")


class PgOutputError(ValueError):
    """A message that does not parse (truncated, or a protocol we do not speak)."""


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str
    name: str
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Insert:
    relation: Relation
    values: tuple[bytes | None, ...]
    """Per column: the value's bytes (binary or text form), None for NULL or an
    unchanged TOAST value (inserts never have those)."""
    binary: tuple[bool, ...]

    def value(self, column: str) -> bytes | None:
        """The named column as bytes; text-form bytea (``\\x…``) is decoded."""
        try:
            index = self.relation.columns.index(column)
        except ValueError:
            raise PgOutputError(f"{self.relation.name} has no column {column!r}") from None
        raw = self.values[index]
        if raw is None or self.binary[index]:
            return raw
        if raw.startswith(b"\\x"):
            return bytes.fromhex(raw[2:].decode("ascii"))
        raise PgOutputError("a text-form bytea that is not hex (bytea_output=escape?)")


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise PgOutputError("truncated message")
        chunk = self.buf[self.pos : end]
        self.pos = end
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def cstring(self) -> str:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise PgOutputError("unterminated string")
        text = self.buf[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return text


class PgOutputDecoder:
    """Feed each message's payload; keeps the relations seen so far."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}

    def feed(self, payload: bytes) -> Insert | None:
        """The insert this message carries, or None for every other message."""
        if not payload:
            raise PgOutputError("empty message")
        kind = payload[0:1]
        if kind == b"R":
            self._relation(_Reader(payload[1:]))
            return None
        if kind == b"I":
            return self._insert(_Reader(payload[1:]))
        return None

    def _relation(self, r: _Reader) -> None:
        oid = r.u32()
        namespace = r.cstring()
        name = r.cstring()
        r.byte()  # replica identity setting
        columns = []
        for _ in range(r.i16()):
            r.byte()  # flags (part of the key)
            columns.append(r.cstring())
            r.u32()  # type oid
            r.i32()  # type modifier
        self.relations[oid] = Relation(oid, namespace, name, tuple(columns))

    def _insert(self, r: _Reader) -> Insert:
        oid = r.u32()
        relation = self.relations.get(oid)
        if relation is None:
            raise PgOutputError(f"insert into relation {oid} before its Relation message")
        if r.take(1) != b"N":
            raise PgOutputError("insert without a new tuple")
        values: list[bytes | None] = []
        binary: list[bool] = []
        for _ in range(r.i16()):
            form = r.take(1)
            if form in (b"n", b"u"):
                values.append(None)
                binary.append(False)
            elif form in (b"t", b"b"):
                values.append(r.take(r.i32()))
                binary.append(form == b"b")
            else:
                raise PgOutputError(f"unknown column form {form!r}")
        return Insert(relation, tuple(values), tuple(binary))
