"""The application: settings, storage, engine, auth, hub and webhooks wired together.

Data flows one way: transport -> protocol -> router -> handler -> service ->
engine -> store; service -> hub -> subscribers. This module owns the lifecycle
of each piece (start in dependency order, stop in reverse) and nothing else.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from syncd.auth.admin import AdminSecret
from syncd.auth.authenticator import Authenticator, Principal, wall_clock_ms
from syncd.auth.revocations import FileRevocationStore, Revocations, RevocationStore
from syncd.auth.tokens import SigningKey
from syncd.config import Settings
from syncd.crdt.engine import Engine
from syncd.history.service import HistoryService
from syncd.http.handlers import admin, cors, crdts, demo, events, health, openapi, tokens
from syncd.http.handlers import history as history_routes
from syncd.http.handlers import revert as revert_routes
from syncd.http.handlers import revocations as revocation_routes
from syncd.http.handlers import usage as usage_routes
from syncd.http.request import Request
from syncd.http.response import Headers
from syncd.http.router import Router
from syncd.hub import Hub
from syncd.metrics import Metrics
from syncd.quotas import Limits, Quotas
from syncd.residency import Residency
from syncd.revert import RevertService
from syncd.service import CrdtService
from syncd.store.base import Recovered, Store
from syncd.webhooks.dispatcher import WebhookDispatcher
from syncd.ws import endpoint
from syncd.ws.connection import SessionContext
from syncd.yjs import endpoint as yjs_endpoint
from syncd.yjs.channel import YjsContext
from syncd.yjs.relay import ClusterAwarenessRelay
from syncd.yjs.room import Rooms

if TYPE_CHECKING:
    from syncd.cluster.replicator import Replicator
    from syncd.http.protocol import ServerContext

log = logging.getLogger("syncd")

_VARY_ORIGIN: Headers = ((b"vary", b"Origin"),)
"""Sent whenever SERVICE_CORS_ORIGINS is set: every answer depends on Origin."""


def _no_entries() -> tuple[dict[str, Any], ...]:
    return ()


class App:
    def __init__(
        self, settings: Settings, *, store_options: Mapping[str, Any] | None = None
    ) -> None:
        """Build and wire every part; ``store_options`` go to the store's constructor
        (tests and benchmarks tune its limits)."""
        self.settings = settings
        self.metrics = Metrics(max_crdt_series=settings.metrics_max_crdt_series)
        self.router = Router()
        self.hub = Hub()
        self.signing_key = (
            SigningKey(settings.signing_key)
            if settings.signing_key is not None
            else SigningKey.generate()
        )
        # One engine for the process's life: recovery reloads it in place.
        self.engine = Engine(
            op_id_window=settings.op_id_window, op_id_ttl_ms=settings.op_id_ttl_s * 1000
        )
        self.auth = Authenticator(
            self.signing_key,
            None,
            default_rate_limit=settings.rate_limit,
            previous_keys=[SigningKey(seed) for seed in settings.previous_signing_keys],
        )
        self.webhooks = (
            WebhookDispatcher(settings.webhook_url, settings.webhook_secret, metrics=self.metrics)
            if settings.webhook_url
            else None
        )
        self.backup: admin.Backup | None = None
        """The embedded store's online backup (None on PostgreSQL)."""
        self.storage_stalled: Callable[[], bool] = lambda: False
        """The embedded store's disk has not answered a probe write in time
        (/health/ready 503); never on PostgreSQL, whose own probe times out."""
        self.store: Store = self._make_store(dict(store_options or {}))
        self.revocations = Revocations(
            self.auth.revocations, self._make_revocation_store(), wall_clock_ms
        )
        budget = max(1, int(settings.memory_budget_mb * 1024 * 1024))
        self.residency = Residency(
            engine=self.engine,
            store=self.store,
            budget_bytes=budget,
            subscribed=self.hub.subscribed,
        )
        engine = self.engine
        self.residency.on_load = self.metrics.watch_residency(
            lambda: self.residency.stats,
            lambda: (len(engine), engine.resident_bytes),
            budget,
        )
        self.service = CrdtService(
            engine=self.engine,
            store=self.store,
            auth=self.auth,
            hub=self.hub,
            metrics=self.metrics,
            webhooks=self.webhooks,
            reload=self.load_state,
            residency=self.residency,
            quotas=Quotas(
                Limits(
                    settings.max_crdt_bytes,
                    settings.namespace_max_crdts,
                    settings.namespace_max_bytes,
                ),
                self.engine,
            ),
        )
        # Each measure of a CRDT's size goes to the store, for the namespace quotas.
        self.engine.on_measured = self.store.note_size
        limits = self.service.quotas.limits
        self.metrics.watch_usage(
            self.store.usages,
            {
                "SERVICE_MAX_CRDT_BYTES": limits.max_crdt_bytes,
                "SERVICE_NAMESPACE_MAX_CRDTS": limits.namespace_max_crdts,
                "SERVICE_NAMESPACE_MAX_BYTES": limits.namespace_max_bytes,
            },
            self.store,
        )
        self.history = HistoryService(engine=self.engine, store=self.store, service=self.service)
        self.reverts = RevertService(store=self.store, service=self.service, history=self.history)
        self.rooms = Rooms()
        self.cluster: Replicator | None = self._make_cluster() if settings.database_url else None
        self.awareness_relay: ClusterAwarenessRelay | None = None
        if self.cluster is not None:
            # Yjs rooms of one document on every node act as one room: the
            # relay publishes through the cluster, which hands it the others'.
            relay = self.awareness_relay = ClusterAwarenessRelay(self.rooms, self.cluster)
            self.rooms.relay = relay
            self.cluster.awareness = relay
            # A node reads a CRDT it does not hold the way it follows one it does.
            self.residency.loader = self.cluster.load
        self.metrics.watch_store(lambda: self.store.stats)
        if self.cluster is not None:
            from syncd.cluster.replicator import WAL_STREAM_STATES

            cluster = self.cluster
            self.metrics.watch_cluster(lambda: cluster.stats)
            self.metrics.watch_wal_stream(lambda: cluster.wal_state, WAL_STREAM_STATES)
        self.server_ctx: ServerContext | None = None
        """Set by the server that runs this app (connection count, shutdown)."""
        self.stopping = False
        """Set by the server when its shutdown starts (SIGTERM): /health/ready
        answers 503 from then on, through the drain and after it."""
        self._register_routes()

    def _register_routes(self) -> None:
        settings = self.settings
        router = self.router
        cluster = self.cluster
        health.register(
            router,
            ready=lambda: self.ready,
            wal_last_seq=lambda: self.wal_last_seq,
            metrics=self.metrics,
            stopping=lambda: self.stopping,
            wal_stream=(lambda: cluster.wal_state) if cluster is not None else None,
        )
        tokens.register(
            router,
            auth=self.auth,
            signing_key=self.signing_key,
            json_max_depth=settings.json_max_depth,
            max_token_ttl_ms=settings.max_token_ttl_ms,
        )
        crdts.register(
            router,
            auth=self.auth,
            engine=self.engine,
            service=self.service,
            history=self.history,
            json_max_depth=settings.json_max_depth,
        )
        history_routes.register(
            router,
            auth=self.auth,
            history=self.history,
            json_max_depth=settings.json_max_depth,
        )
        revert_routes.register(
            router, auth=self.auth, reverts=self.reverts, json_max_depth=settings.json_max_depth
        )
        events.register(
            router,
            auth=self.auth,
            engine=self.engine,
            service=self.service,
            hub=self.hub,
            metrics=self.metrics,
            buffer_bytes=settings.subscriber_buffer_bytes,
            ping_s=settings.sse_ping_s,
        )
        openapi.register(router)
        endpoint.register(
            router,
            SessionContext(
                auth=self.auth,
                engine=self.engine,
                store=self.store,
                hub=self.hub,
                metrics=self.metrics,
                service=self.service,
                settings=settings,
                server=lambda: self.server_ctx,
            ),
        )
        yjs_endpoint.register(
            router,
            YjsContext(
                auth=self.auth,
                engine=self.engine,
                hub=self.hub,
                service=self.service,
                metrics=self.metrics,
                settings=settings,
                rooms=self.rooms,
                server=lambda: self.server_ctx,
            ),
        )
        admin.register(
            router,
            auth=self.auth,
            backup=self.backup,
        )
        revocation_routes.register(
            router,
            auth=self.auth,
            revocations=self.revocations,
            json_max_depth=settings.json_max_depth,
        )
        usage_routes.register(
            router, auth=self.auth, store=self.store, limits=self.service.quotas.limits
        )
        cors.register(router, settings.cors_origins)
        if settings.demo:
            demo.register(
                router,
                self.signing_key,
                max_token_ttl_ms=settings.max_token_ttl_ms,
                token_window_ms=settings.demo_token_window_ms,
            )

    def _make_store(self, options: dict[str, Any]) -> Store:
        settings = self.settings
        if settings.database_url:
            # Imported here: psycopg is the [postgres] extra.
            from syncd.store.postgres import PostgresStore

            return PostgresStore(
                settings.database_url,
                publication=settings.wal_pub if settings.wal_connstr is not None else None,
                on_written=self.metrics.wal_entries_total.inc,
                on_commit=self.metrics.store_commit,
                history_retention=settings.history_retention,
                **options,
            )
        from syncd.store.embedded.store import FileStore

        store = FileStore(
            settings.data_dir,
            fsync=settings.fsync,
            on_written=self.metrics.wal_entries_total.inc,
            on_commit=self.metrics.store_commit,
            history_retention=settings.history_retention,
            **options,
        )
        self.backup = store.backup_plan
        self.storage_stalled = lambda: store.stalled
        return store

    def _make_revocation_store(self) -> RevocationStore:
        if self.settings.database_url:
            from syncd.auth.revocations_pg import PgRevocationStore
            from syncd.store.postgres import PostgresStore

            assert isinstance(self.store, PostgresStore)
            return PgRevocationStore(self.store.pool)
        return FileRevocationStore(self.settings.data_dir)

    def _make_cluster(self) -> Replicator:
        from syncd.cluster.replicator import Replicator, WalSettings
        from syncd.store.postgres import PostgresStore

        store = self.store
        assert isinstance(store, PostgresStore)
        settings = self.settings
        wal = None
        if settings.wal_connstr is not None:
            wal = WalSettings(settings.wal_connstr, settings.wal_slot, settings.wal_pub)
        # The one interface by which other nodes' records reach the engine and
        # the subscribers: the service.
        return Replicator(store, self.service, node_id=settings.node_id, wal=wal)

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Open storage and recover state; called before the socket is bound."""
        settings = self.settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        from syncd.store.embedded.store import FileStore

        if isinstance(self.store, FileStore):
            self.store.lock()  # before admin_token is written: the directory may be in use
        self.auth.use_admin_secret(AdminSecret.load(settings.admin_token, settings.data_dir))
        admin.remove_leftovers(settings.data_dir)
        if self.cluster is not None:
            # SERVICE_WAL_CONNSTR: a server that cannot stream stops the
            # start here, before anything runs (DatabaseSetupError).
            await self.cluster.check_source()
        recovered = await self.store.open()
        self.load_state(recovered)
        await self.revocations.open()  # after the store: on PostgreSQL it made the table
        log.info("tokens verify with keys %s", ", ".join(k.key_id for k in self.auth.keys))
        self.residency.check()  # the snapshot may hold more than the budget
        self.service.measure_sizes()  # sizes a crash left unknown (the quotas)
        # A store that loads on demand reads every CRDT back by itself: its
        # snapshots need not carry them (start-up then reads no CRDT state).
        self.store.set_snapshot_source(
            _no_entries if self.store.loads_on_demand else self.engine.export_entries,
            self.engine.export_one,
        )
        if self.cluster is not None:
            # Only now may other nodes' records be applied: the state is loaded;
            # its first catch-up covers whatever committed since.
            self.cluster.start()
        if self.awareness_relay is not None:
            self.awareness_relay.start()
        if self.webhooks is not None:
            self.webhooks.start()

    def load_state(self, recovered: Recovered) -> None:
        engine = self.engine
        engine.clear()
        if self.store.loads_on_demand:
            # Every CRDT comes back from the store when it is first used.
            log.info("state: CRDTs load from storage on first use")
            return
        for entry in recovered.entries:
            engine.import_entry(entry)
        # Consumed in C: on a long log a Python loop adds about a fifth to the cost
        # of replaying. The snapshot holds the CRDTs that were in memory: the
        # records of any other are passed over (the store loads them on use).
        deque(map(engine.replay_resident, recovered.records), maxlen=0)
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
        if self.awareness_relay is not None:
            await self.awareness_relay.close()
        if self.cluster is not None:
            await self.cluster.close()
        await self.revocations.close()
        await self.store.close()

    # -- shared by the handlers -------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.service.writable and not self.storage_stalled()

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
            # The answer still depends on Origin: a shared cache must not hand
            # this one (no CORS headers) to a page on an allowed origin.
            return _VARY_ORIGIN
        allowed = b"*" if "*" in origins else origin.encode("latin-1")
        return (
            (b"access-control-allow-origin", allowed),
            (b"vary", b"Origin"),
            (b"access-control-expose-headers", b"Retry-After"),
        )
