"""A CRDT's past, service side: pages of its retained ops, its state at a seq
(``?at=``), and restoring that state.

- ``service.py``: :class:`HistoryService`, what the routes
  (``http/handlers/history.py``, ``?at=`` in ``http/handlers/crdts.py``) and
  the revert (``revert.py``) call;
- ``reads.py``: a page of ``/history``, all or one writer's (:class:`Writer`),
  and its limits;
- ``restore.py``: the ops that take the current state to an earlier one,
  applied through the op path.

The store side keeps the records and checkpoints and decides how long
(``SERVICE_HISTORY_RETENTION``), behind ``Store.history`` and
``Store.history_base``: the index of what each CRDT retains
(``store/history_index.py``, ``HistoryIndex``; ``Retention`` is the policy), the
embedded store's history files (``store/embedded/history_files.py``,
``HistoryFiles``) and what joins the two for it
(``store/embedded/history.py``, ``FileStoreHistory``); PostgreSQL keeps its
history in tables (``store/postgres.py``).
"""

from syncd.history.reads import (
    DEFAULT_HISTORY_LIMIT,
    MAX_HISTORY_LIMIT,
    MAX_HISTORY_SCAN,
    Writer,
    history_item,
)
from syncd.history.service import HistoryService

__all__ = [
    "DEFAULT_HISTORY_LIMIT",
    "MAX_HISTORY_LIMIT",
    "MAX_HISTORY_SCAN",
    "HistoryService",
    "Writer",
    "history_item",
]
