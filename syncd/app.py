"""The application: settings, storage, engine, auth, hub and webhooks wired together.

Data flows one way: transport -> protocol -> router -> handler -> service ->
engine -> store; service -> hub -> subscribers. This module owns the lifecycle
of each piece (start in dependency order, stop in reverse) and nothing else.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from syncd.auth.admin import AdminSecret
from syncd.auth.authenticator import Authenticator, Principal
from syncd.auth.tokens import SigningKey
from syncd.config import Settings
from syncd.crdt.engine import Engine
from syncd.http.handlers import cors, crdts, demo, events, health, openapi, tokens
from syncd.http.request import Request
from syncd.http.response import Headers
from syncd.http.router import Router
from syncd.hub import Hub
from syncd.metrics import Metrics
from syncd.service import CrdtService
from syncd.store.base import Recovered, Store
from syncd.webhooks.dispatcher import WebhookDispatcher

if TYPE_CHECKING:
    from syncd.cluster.replicator import Replicator

log = logging.getLogger("syncd")


class App:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.router = Router()
        self.hub = Hub()
        self.signing_key = (
            SigningKey(settings.signing_key)
            if settings.signing_key is not None
            else SigningKey.generate()
        )
        self.engine = Engine(op_id_window=settings.op_id_window)
        self.service = CrdtService(self)
        self.cluster: Replicator | None = None
        self.store: Store = self._make_store()
        self.metrics.watch_store(lambda: self.store.stats)
        self._auth: Authenticator | None = None
        self.webhooks: WebhookDispatcher | None = None
        self.server_ctx: Any = None
        health.register(self)
        tokens.register(self)
        crdts.register(self)
        events.register(self)
        openapi.register(self)
        from syncd.ws import endpoint

        endpoint.register(self)
        cors.register(self)
        if settings.demo:
            demo.register(self)

    def _make_store(self) -> Store:
        settings = self.settings
        if settings.database_url:
            # Imported here: psycopg is the [postgres] extra.
            from syncd.cluster.replicator import Replicator, WalSettings
            from syncd.store.postgres import PostgresStore

            wal = None
            if settings.wal_connstr is not None:
                wal = WalSettings(settings.wal_connstr, settings.wal_slot, settings.wal_pub)
            store = PostgresStore(
                settings.database_url,
                publication=settings.wal_pub if wal is not None else None,
                on_written=self.metrics.wal_entries_total.inc,
            )
            # The one interface by which other nodes' records reach the engine
            # and the subscribers: the service.
            self.cluster = Replicator(store, self.service, node_id=settings.node_id, wal=wal)
            return store
        from syncd.store.filestore import FileStore

        return FileStore(
            settings.data_dir,
            fsync=settings.fsync,
            on_written=self.metrics.wal_entries_total.inc,
        )

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Open storage and recover state; called before the socket is bound."""
        settings = self.settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        admin = AdminSecret.load(settings.admin_token, settings.data_dir)
        self._auth = Authenticator(self.signing_key, admin, default_rate_limit=settings.rate_limit)
        recovered = await self.store.open()
        self.load_state(recovered)
        self.store.set_snapshot_source(lambda: self.engine.export_entries())
        if self.cluster is not None:
            # Only now may other nodes' records be applied: the state is loaded;
            # its first catch-up covers whatever committed since.
            self.cluster.start()
        if settings.webhook_url:
            self.webhooks = WebhookDispatcher(
                settings.webhook_url, settings.webhook_secret, metrics=self.metrics
            )
            self.webhooks.start()

    def load_state(self, recovered: Recovered) -> None:
        engine = Engine(op_id_window=self.settings.op_id_window)
        for entry in recovered.entries:
            engine.import_entry(entry)
        # Consumed in C: on a long log a Python loop adds about a fifth to the cost of replaying.
        deque(map(engine.replay, recovered.records), maxlen=0)
        self.engine = engine
        log.info(
            "state loaded: %d CRDTs from the snapshot, %d records replayed",
            len(recovered.entries),
            len(recovered.records),
        )

    async def close(self) -> None:
        """Flush and release everything; called after connections are done."""
        await self.service.close()
        if self.webhooks is not None:
            await self.webhooks.close(self.settings.webhook_drain_s)
        if self.cluster is not None:
            await self.cluster.close()
        await self.store.close()

    # -- shared by the handlers -------------------------------------------------

    @property
    def auth(self) -> Authenticator:
        if self._auth is None:
            raise RuntimeError("the app has not been started")
        return self._auth

    @property
    def ready(self) -> bool:
        return self.service.writable

    @property
    def wal_last_seq(self) -> int:
        return self.store.wal_last_seq

    def authenticate(self, request: Request, ns: str | None) -> Principal:
        return self.auth.authenticate(request.headers.get("authorization"), ns)

    def extra_headers(self, request: Request) -> Headers:
        """CORS headers for allowed origins (SERVICE_CORS_ORIGINS)."""
        origins = self.settings.cors_origins
        if not origins:
            return ()
        origin = request.headers.get("origin")
        if origin is None or ("*" not in origins and origin not in origins):
            return ()
        allowed = b"*" if "*" in origins else origin.encode("latin-1")
        return (
            (b"access-control-allow-origin", allowed),
            (b"vary", b"Origin"),
            (b"access-control-expose-headers", b"Retry-After"),
        )
