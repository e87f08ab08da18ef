"""The logical replication consumer: large op records from the WAL stream.

psycopg 3 does not speak the replication protocol, so this uses psycopg2's
``LogicalReplicationConnection``, which blocks; it runs in its own thread and
hands each record to the event loop with ``call_soon_threadsafe``.

The slot is TEMPORARY: PostgreSQL drops it when this connection ends (a clean
shutdown, a crash, a lost network), so a node that left never pins WAL and
there is nothing to sweep. The price is that a new slot starts at "now":
after every (re)connect the consumer calls ``on_started`` and the store
compares every CRDT with the tables, which covers whatever committed while no
slot existed.

Before the node starts, :func:`server_wal_level` makes one connection the way
the stream does (the credentials, the REPLICATION attribute) and reads the
server's ``wal_level`` and the database it would decode: the replicator
refuses to start on anything but ``logical`` (no slot could ever be made) and
on another database than DATABASE_URL's (``Replicator.check_source``).
Once running, :attr:`WalConsumer.streaming` says whether the stream is up
(the ``service_cluster_wal_stream_state`` gauge, ``/health/ready``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import selectors
import threading
from collections.abc import Callable
from typing import Final

import psycopg2
import psycopg2.errors
import psycopg2.extras

from syncd.cluster.pgoutput import PgOutputDecoder, PgOutputError
from syncd.store.pg_pool import CONNECT_TIMEOUT_S
from syncd.store.pg_start import describe

log = logging.getLogger("syncd.store.wal")

SLOT_NAME_MAX: Final = 63
"""PostgreSQL's identifier length (NAMEDATALEN - 1)."""

POLL_S: Final = 1.0
"""Longest wait for a message before the thread looks at its stop flag again
(a stop also wakes it at once through a pipe)."""

RETRY_MIN_S: Final = 0.2
RETRY_MAX_S: Final = 5.0
"""Backoff between reconnect attempts while PostgreSQL is unreachable."""

SOURCE_ERRORS: Final = (psycopg2.Error, OSError)
"""What connecting to the replication source may raise at all."""
SOURCE_TRANSIENT: Final = (psycopg2.OperationalError, OSError)
"""Of those, what a server that is away or busy raises (worth waiting for,
unless ``pg_start.permanent`` recognises a refusal)."""

NEEDED_WAL_LEVEL: Final = "logical"

FEEDBACK_EVERY: Final = 64
"""Messages between explicit flush confirmations (psycopg2 also answers the
server's keepalives), so the slot's restart point keeps moving."""


def server_wal_level(dsn: str, connect_timeout_s: int = CONNECT_TIMEOUT_S) -> tuple[str, str]:
    """The ``wal_level`` of the server behind ``dsn`` and the database the
    stream would decode (logical decoding reads one database's changes),
    read on a logical replication connection like the stream's (so a role
    without REPLICATION, or a refused password, fails here). Blocks: run it
    in a thread."""
    conn = psycopg2.connect(
        dsn,
        connection_factory=psycopg2.extras.LogicalReplicationConnection,
        connect_timeout=connect_timeout_s,
    )
    try:
        cur = conn.cursor()
        cur.execute("SHOW wal_level")
        row = cur.fetchone()
        level = str(row[0]) if row is not None else ""
        cur.execute("IDENTIFY_SYSTEM")  # systemid, timeline, xlogpos, dbname
        row = cur.fetchone()
        database = str(row[3]) if row is not None and row[3] is not None else ""
        return level, database
    finally:
        conn.close()


def slot_name(prefix: str, node_id: str) -> str:
    """The node's slot: ``<SERVICE_WAL_SLOT>_<node id>`` in slot-name characters,
    shortened with a hash when it would pass the identifier limit."""
    node = re.sub(r"[^a-z0-9_]", "_", node_id.lower())
    name = f"{prefix}_{node}"
    if len(name) <= SLOT_NAME_MAX:
        return name
    digest = hashlib.sha256(node_id.encode()).hexdigest()[:12]
    return f"{name[: SLOT_NAME_MAX - 13]}_{digest}"


class WalConsumer:
    """Streams inserts into ``<schema>.ops`` and calls ``on_record`` (from the
    thread) with each ``record`` value larger than ``min_record_bytes``."""

    def __init__(
        self,
        dsn: str,
        *,
        slot: str,
        publication: str,
        schema: str,
        on_record: Callable[[bytes], None],
        on_started: Callable[[], None],
        min_record_bytes: int = 0,
    ) -> None:
        self._dsn = dsn
        self._slot = slot
        self._publication = publication
        self._schema = schema
        self._on_record = on_record
        self._on_started = on_started
        self._min = min_record_bytes
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self.streaming = False
        """True while a slot exists and the stream is read."""
        self.slot_in_use: str | None = None
        self.records = 0
        """Records handed over so far."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="syncd-wal", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _run(self) -> None:
        delay = RETRY_MIN_S
        while not self._stop.is_set():
            conn = None
            try:
                conn = psycopg2.connect(
                    self._dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection
                )
                self._stream(conn)
                delay = RETRY_MIN_S
            except (psycopg2.Error, OSError, PgOutputError) as exc:
                if self._stop.is_set():
                    break
                log.warning(
                    "replication stream (SERVICE_WAL_CONNSTR): %s; retrying in %.1fs",
                    describe(exc),
                    delay,
                )
            finally:
                self.streaming = False
                if conn is not None:
                    try:
                        conn.close()
                    except psycopg2.Error:
                        pass
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, RETRY_MAX_S)

    def _create_slot(self, cur: psycopg2.extras.ReplicationCursor) -> str:
        name = self._slot
        for _ in range(2):
            try:
                cur.execute(
                    f"CREATE_REPLICATION_SLOT {name} TEMPORARY LOGICAL pgoutput NOEXPORT_SNAPSHOT"
                )
                cur.fetchall()
                return name
            except psycopg2.errors.DuplicateObject:
                # Another live node uses this id (or a session of ours is still
                # ending): a name of our own keeps both working.
                name = f"{self._slot[: SLOT_NAME_MAX - 9]}_{secrets.token_hex(4)}"
                log.warning("replication slot %s exists; using %s", self._slot, name)
        raise psycopg2.OperationalError("could not create a replication slot")

    def _stream(self, conn: psycopg2.extensions.connection) -> None:
        cur = conn.cursor()
        slot = self._create_slot(cur)
        options = {"proto_version": "1", "publication_names": self._publication}
        if conn.server_version >= 140000:
            options["binary"] = "true"
        cur.start_replication(slot_name=slot, decode=False, options=options)
        self.slot_in_use = slot
        self.streaming = True
        log.info("replication stream on slot %s (publication %s)", slot, self._publication)
        self._on_started()
        # Not select.select: it refuses descriptors past FD_SETSIZE (1023), and
        # a node with a thousand clients connected opens this one past that.
        with selectors.DefaultSelector() as waiting:
            waiting.register(conn.fileno(), selectors.EVENT_READ)
            waiting.register(self._wake_r, selectors.EVENT_READ)
            self._read_messages(cur, waiting)

    def _read_messages(
        self, cur: psycopg2.extras.ReplicationCursor, waiting: selectors.BaseSelector
    ) -> None:
        decoder = PgOutputDecoder()
        unconfirmed = 0
        while not self._stop.is_set():
            msg = cur.read_message()
            if msg is None:
                if unconfirmed:
                    cur.send_feedback(flush_lsn=cur.wal_end)
                    unconfirmed = 0
                waiting.select(POLL_S)
                continue
            insert = decoder.feed(msg.payload)
            if (
                insert is not None
                and insert.relation.name == "ops"
                and insert.relation.namespace == self._schema
            ):
                record = insert.value("record")
                if record is not None and len(record) > self._min:
                    self.records += 1
                    self._on_record(record)
            unconfirmed += 1
            if unconfirmed >= FEEDBACK_EVERY:
                cur.send_feedback(flush_lsn=msg.data_start)
                unconfirmed = 0
