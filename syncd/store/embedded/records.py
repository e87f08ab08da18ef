"""The log records that recovery hands back, kept encoded until they are replayed.

Recovery checks every frame (CRC, sequence) in the store's I/O thread, but
decodes a record only when the caller iterates over it, one chunk at a time:
replaying a long log then holds one chunk of decoded maps at a time instead of
all of them (a decoded op record takes several times its encoded size), and
each chunk is replayed while it is still in the CPU caches.

Iterating again decodes again; indexing and slicing decode what they return.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from typing import overload

from syncd.store.base import Record
from syncd.store.embedded.log import RecordChunk, decode_chunk


class LogRecords(Sequence[Record]):
    """The records of ``chunks`` in log order, decoded on demand."""

    __slots__ = ("_chunks", "_count", "_decoded", "_starts")

    def __init__(self, chunks: list[RecordChunk]) -> None:
        self._chunks = chunks
        # The index of each chunk's first record, for indexing.
        self._starts = list(itertools.accumulate((c.count for c in chunks), initial=0))
        self._count = self._starts[-1]
        # Chunks decoded for good: those the replay tail holds records of.
        self._decoded: dict[int, list[Record]] = {}

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Record]:
        # Chained in C: no Python frame per record.
        return itertools.chain.from_iterable(map(self._chunk_records, range(len(self._chunks))))

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("log record index out of range")
        i = bisect.bisect_right(self._starts, index) - 1
        return self._chunk_records(i)[index - self._starts[i]]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LogRecords | list | tuple):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LogRecords({self._count} records in {len(self._chunks)} chunks)"

    def last(self, n: int) -> list[tuple[int, Record]]:
        """The last ``n`` records with their log sequence numbers; their chunks stay
        decoded, so that the replay tail and the replay share the same maps."""
        first = max(self._count - n, 0)
        out: list[tuple[int, Record]] = []
        for i in range(bisect.bisect_right(self._starts, first) - 1, len(self._chunks)):
            chunk = self._chunks[i]
            records = self._decoded[i] = decode_chunk(chunk)
            skip = max(first - self._starts[i], 0)
            out.extend(zip(itertools.count(chunk.first_lsn + skip), records[skip:]))
        return out

    def after(self, lsn: int) -> Iterator[tuple[int, Record]]:
        """The records with a log sequence number above ``lsn``, with it."""
        for i, chunk in enumerate(self._chunks):
            end = chunk.first_lsn + chunk.count
            if end <= lsn + 1:
                continue
            records = self._chunk_records(i)
            skip = max(lsn + 1 - chunk.first_lsn, 0)
            yield from zip(itertools.count(chunk.first_lsn + skip), records[skip:])

    def _chunk_records(self, i: int) -> list[Record]:
        records = self._decoded.get(i)
        return records if records is not None else decode_chunk(self._chunks[i])
