"""The embedded store: syncd's data in append-only files of one directory.

One module per concern:

- ``store.py``: the facade, :class:`FileStore`, the ``Store`` the service
  talks to; it answers for failures (the probe, ``on_failure``, ``reload``);
- ``state.py``: the store's phase (new, open, reloading, closing, closed),
  the table of its moves, and the facts beside it (the log's failure, the
  caller's suspect memory);
- ``commit.py``: group commit (appends queued on the loop, written and
  fsynced in batches by one flusher, then the history's write);
- ``recovery.py``: the directory's lock, and the durable state read back
  at open, at ``reload`` and by ``syncd verify``;
- ``compaction.py``: snapshots once the log has grown, the log cut behind
  them, the history's retention;
- ``log.py``: the write-ahead log (segments of CRC-framed records, the
  writer and its repair after a failure);
- ``records.py``: what one log record holds;
- ``snapshot.py``: the snapshot file that lets the log be compacted;
- ``history_files.py``: the history segments, where every CRDT's op records
  and checkpoints are addressed by position;
- ``history.py``: the history files joined to their index;
- ``keydir.py`` and ``hint.py``: that index, the key directory
  (a ``HistoryIndex``, ``syncd/store/history_index.py``) over a table on
  disk sorted by key, so start-up reads the table's directory, not the data;
- ``iothread.py``: a thread that runs blocking file calls in order (one
  for the log, one for snapshots, history reads and backups);
- ``backup.py`` and ``verify.py``: online backups and their check.

Each module's docstring gives its file format and lifecycle.
"""

from syncd.store.embedded.store import FileStore, StoreLockedError

__all__ = ["FileStore", "StoreLockedError"]
