"""The embedded store: syncd's data in append-only files of one directory.

One module per concern:

- ``store.py``: the facade, :class:`FileStore`, the ``Store`` the service
  talks to;
- ``log.py``: the write-ahead log (segments of CRC-framed records, group
  commit's fsync);
- ``records.py``: what one log record holds;
- ``snapshot.py``: the snapshot that lets the log be compacted;
- ``history_files.py``: the history segments, where every CRDT's op records
  and checkpoints are addressed by position;
- ``history.py``: the history files joined to their index
  (``syncd/store/history_index.py``);
- ``hint.py``: the index saved beside the history segments, so start-up
  reads the index and not the data;
- ``iothread.py``: the one thread file I/O runs on;
- ``backup.py`` and ``verify.py``: online backups and their check.

Each module's docstring gives its file format and lifecycle.
"""

from syncd.store.embedded.store import FileStore, StoreLockedError

__all__ = ["FileStore", "StoreLockedError"]
