"""Prometheus metrics: ops, WAL, merge time, HTTP answers and latency, connections,
webhooks, store commits, the cluster's replication, process, build, and the
configured limits.

Each application instance owns its registry, so several servers can run in one
process (tests) without clashing.

The counters bumped once per op or per request (ops, merge latency, WAL
entries, HTTP answers) are plain ints and lists kept on the event loop thread,
turned into metric families only when scraped (:class:`HotCounters`).
prometheus_client's own Counter and Histogram take a lock on every ``inc`` and
``observe`` (about 0.5 and 1.2 us): a tenth of an op's cost on the WebSocket
path. Everything that touches these counters runs on the loop thread, scrapes
included, so they need no lock. The rarely-touched gauges and webhook counters
stay prometheus_client objects.

``service_ops_total`` is the one family labelled by CRDT id. Its number of
``crdt_id`` values is capped (``SERVICE_METRICS_MAX_CRDT_SERIES``), so a scrape
does not grow with the number of CRDTs: past the cap, the ops of CRDT ids not
seen before count under ``crdt_id="#other"`` (:data:`OVERFLOW_CRDT_ID`), and
``service_ops_overflow_crdts_total`` counts those ids.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

MERGE_BUCKETS: Final = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.05,
    0.1,
)
_BUCKET_LABELS: Final[tuple[str, ...]] = (
    *(str(floatToGoString(b)) for b in MERGE_BUCKETS),  # type: ignore[no-untyped-call]
    "+Inf",
)
"""The ``le`` labels, spelled as prometheus_client spells them."""

REQUEST_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""``service_http_request_duration_seconds``: from half a millisecond (a read
from memory) to ten seconds (a large backup's head waits for its plan)."""

COMMIT_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)
"""``service_store_commit_seconds``: a page-cache write takes tens of
microseconds, an fsync or a PostgreSQL transaction milliseconds."""

STATUS_CLASSES: Final = ("0xx", "1xx", "2xx", "3xx", "4xx", "5xx")
"""The ``status`` label of the request histogram, by ``status // 100``."""

REQUEST_DOC: Final = (
    "Time from a whole request read to its answer written (for streams and "
    "WebSocket upgrades, to the answer's head), by route class and status class"
)
COMMIT_DOC: Final = (
    "Time to make one group commit durable: the log write and its fsync "
    "(embedded store), or the transaction (PostgreSQL)"
)

OPS_DOC: Final = "CRDT operations applied"
OPS_LABELS: Final = ("ns", "crdt_id", "op_type")
OVERFLOW_DOC: Final = (
    'CRDT ids whose ops count under crdt_id="#other" of service_ops_total '
    "(past SERVICE_METRICS_MAX_CRDT_SERIES)"
)

# First-come CRDT ids that get a service_ops_total series of their own. Each
# id is one series per op type it has seen (usually one or two), each two
# samples (_total and _created) of about 90 bytes: at the cap 1000-2000
# series, 180-360 KB of scrape with short ids, well inside what one
# Prometheus target is commonly allowed, and enough for every CRDT of a small
# deployment to be seen by name. Past it, per-id series stop being something
# to read anyway: dashboards aggregate by namespace.
DEFAULT_MAX_CRDT_SERIES: Final = 1000

OVERFLOW_CRDT_ID: Final = "#other"
"""The ``crdt_id`` label of the ops of every CRDT id past the cap. ``#`` is
outside the CRDT id syntax (``CRDT_ID_RE`` in syncd/ids.py), so no real id can
ever be spelled this way."""

WAL_DOC: Final = "WAL entries written"
MERGE_DOC: Final = "Merge/apply latency"
HTTP_DOC: Final = "HTTP requests answered"

STORE_COUNTERS: Final = (
    (
        "batches",
        "service_store_commits_total",
        "Group commits: log writes, or PostgreSQL transactions",
    ),
    ("fsyncs", "service_store_fsyncs_total", "Syncs of the embedded log to disk"),
    ("bytes_written", "service_store_log_bytes_total", "Bytes appended to the embedded log"),
    ("snapshots", "service_store_snapshots_total", "Snapshots written by the store"),
    ("failures", "service_store_write_failures_total", "Failed writes, syncs or commits"),
)
"""(field of the store's stats, metric, help). Records per commit, the group
commit's batch size, is ``service_wal_entries_total`` over the commits."""

CLUSTER_COUNTERS: Final = (
    ("notices", "service_cluster_notifications_total", "Notifications from other nodes handled"),
    ("wal_records", "service_cluster_stream_records_total", "Records from the replication stream"),
    ("syncs", "service_cluster_table_reads_total", "CRDTs read from the tables outside a commit"),
    ("catch_ups", "service_cluster_catch_ups_total", "Comparisons of every CRDT with the tables"),
    ("conflicts", "service_cluster_conflicts_total", "Optimistic batches redone under the locks"),
    ("awareness_sent", "service_cluster_awareness_sent_total", "Yjs awareness notices sent"),
    (
        "awareness_dropped",
        "service_cluster_awareness_dropped_total",
        "Yjs awareness notices not sent (too large, outbox full, database away)",
    ),
)
"""(field of ``ClusterStats``, metric, help): PostgreSQL clusters only."""


class WalCounter:
    """``service_wal_entries_total``: ``inc(n)`` as on a prometheus Counter."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0
        self.created = time.time()

    def inc(self, amount: int = 1) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self.value += amount


class MergeHistogram:
    """One namespace's ``service_merge_duration_seconds``: bucket counts and sum."""

    __slots__ = ("counts", "created", "total")

    def __init__(self) -> None:
        # counts[i]: observations in (MERGE_BUCKETS[i-1], MERGE_BUCKETS[i]];
        # the last slot is above every bound (+Inf only).
        self.counts = [0] * (len(MERGE_BUCKETS) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(MERGE_BUCKETS, seconds)] += 1
        self.total += seconds


class Buckets:
    """One lock-free histogram: counts per bucket of ``bounds``, and the sum."""

    __slots__ = ("bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        # counts[i]: observations in (bounds[i-1], bounds[i]]; the last slot
        # is above every bound (+Inf only).
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def add_to(self, family: HistogramMetricFamily, labels: dict[str, str]) -> None:
        """Its cumulative buckets, sum and creation time as samples of ``family``."""
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for label, count in zip(_labels(self.bounds), self.counts, strict=True):
            cumulative += count
            buckets.append((label, cumulative))
        family.add_metric(list(labels.values()), buckets, self.total)
        family.samples.append(Sample(f"{family.name}_created", labels, self.created))


def _labels(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """The ``le`` labels of ``bounds``, spelled as prometheus_client spells them."""
    return (*(str(floatToGoString(b)) for b in bounds), "+Inf")  # type: ignore[no-untyped-call]


class RequestLatency:
    """``service_http_request_duration_seconds`` by route class and status class.

    One list of histograms per route class, indexed by ``status // 100``: an
    observation is a dict look-up, a list index and a bisect."""

    __slots__ = ("by_route",)

    def __init__(self) -> None:
        self.by_route: dict[str, list[Buckets | None]] = {}

    def observe(self, route: str, status: int, seconds: float) -> None:
        cells = self.by_route.get(route)
        if cells is None:
            cells = self.by_route[route] = [None] * len(STATUS_CLASSES)
        index = status // 100  # HTTP statuses are 100-599
        histogram = cells[index]
        if histogram is None:
            histogram = cells[index] = Buckets(REQUEST_BUCKETS)
        # Buckets.observe, inline: this runs once per request.
        histogram.counts[bisect_left(REQUEST_BUCKETS, seconds)] += 1
        histogram.total += seconds

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "service_http_request_duration_seconds", REQUEST_DOC, labels=["route", "status"]
        )
        for route, cells in list(self.by_route.items()):
            for index, histogram in enumerate(cells):
                if histogram is not None:
                    histogram.add_to(family, {"route": route, "status": STATUS_CLASSES[index]})
        return family


class LabelledCounts:
    """One labelled counter: a count and a creation time per label key."""

    __slots__ = ("counts", "created")

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}
        self.created: dict[Any, float] = {}

    def inc(self, key: Any) -> None:
        counts = self.counts
        count = counts.get(key)
        if count is None:
            self.created[key] = time.time()
            counts[key] = 1
        else:
            counts[key] = count + 1

    def family(self, name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=labels)
        created = self.created
        for key, count in list(self.counts.items()):
            values = [str(v) for v in key] if isinstance(key, tuple) else [str(key)]
            family.add_metric(values, count, created=created.get(key))
        return family


FOLDED_EXACT: Final = 10_000
"""Overflowed ids counted exactly (a set, ~100 bytes each: ~1 MB)."""
FOLDED_BITS: Final = 1 << 21
"""Past :data:`FOLDED_EXACT`, the ids are counted by linear counting in a
bitmap of this many bits (256 KiB): within about 1% up to a few million
ids, and memory that does not grow with them."""


class DistinctCount:
    """How many distinct keys were added: exact up to :data:`FOLDED_EXACT`,
    then an estimate that never goes down (linear counting: each key sets one
    bit of a bitmap; n ~ -m ln(zero bits / m))."""

    __slots__ = ("_bits", "_exact", "_zeros")

    def __init__(self) -> None:
        self._exact: set[tuple[str, str]] | None = set()
        self._bits: bytearray | None = None
        self._zeros = FOLDED_BITS

    def add(self, key: tuple[str, str]) -> None:
        exact = self._exact
        if exact is not None:
            if key in exact:
                return
            exact.add(key)
            if len(exact) <= FOLDED_EXACT:
                return
            self._exact = None
            self._bits = bytearray(FOLDED_BITS // 8)
            for k in exact:
                self._set(k)
            return
        self._set(key)

    def _set(self, key: tuple[str, str]) -> None:
        bits = self._bits
        assert bits is not None
        i = hash(key) & (FOLDED_BITS - 1)
        byte, mask = i >> 3, 1 << (i & 7)
        if not bits[byte] & mask:
            bits[byte] |= mask
            self._zeros -= 1

    def __len__(self) -> int:
        if self._exact is not None:
            return len(self._exact)
        zeros = max(self._zeros, 1)
        return max(FOLDED_EXACT + 1, round(-FOLDED_BITS * math.log(zeros / FOLDED_BITS)))


OTHER_NAMESPACES: Final = "#other"
"""Not a namespace name (``#`` is not allowed in one): the rest, summed."""

MAX_NAMESPACE_SERIES: Final = 1000
"""Namespaces given series of their own, so that a scrape stays bounded
however many namespaces there are: in the usage gauges the largest by bytes;
in ``service_merge_duration_seconds`` and in the ``crdt_id="#other"`` series
of ``service_ops_total`` the first ones to take an op. The rest count under
``ns="#other"``."""


class OpCounts:
    """``service_ops_total``, with at most ``max_ids`` CRDT ids given series of
    their own (first come, kept for the process's life); the ops of any other
    id count under :data:`OVERFLOW_CRDT_ID` in its namespace, or under
    :data:`OTHER_NAMESPACES` once :data:`MAX_NAMESPACE_SERIES` namespaces
    have such a series.

    Every (ns, crdt_id, op_type) with a series of its own maps to the
    one-element list that holds its count: an op on it is one dict look-up
    and one increment. Nothing is kept of the ids past the cap (that would
    grow with the number of CRDTs, which is what the cap is against): their
    ops look up the overflow series, one more dict probe.
    """

    __slots__ = ("cells", "created", "folded", "folded_ns", "ids", "max_ids", "series")

    def __init__(self, max_ids: int = DEFAULT_MAX_CRDT_SERIES) -> None:
        if max_ids < 0:
            raise ValueError("max_ids must be at least 0")
        self.max_ids = max_ids
        self.cells: dict[tuple[str, str, str], list[int]] = {}
        """Every (ns, crdt_id, op_type) with its own series -> its count cell."""
        self.series: dict[tuple[str, str, str], list[int]] = {}
        """The exposed (ns, crdt_id label, op_type) -> count cell."""
        self.created: dict[tuple[str, str, str], float] = {}
        self.ids: set[tuple[str, str]] = set()
        """(ns, crdt_id) with series of their own: at most ``max_ids``."""
        self.folded = DistinctCount()
        """How many ids count under the overflow value."""
        self.folded_ns: set[str] = set()
        """Namespaces with overflow series of their own: at most
        :data:`MAX_NAMESPACE_SERIES`."""

    def count(self, ns: str, crdt_id: str, op_type: str) -> None:
        """One op applied (durable)."""
        key = (ns, crdt_id, op_type)
        cell = self.cells.get(key)
        if cell is None:
            cell = self._first(key)
        cell[0] += 1

    def _first(self, key: tuple[str, str, str]) -> list[int]:
        """The cell of a key without one: its own new series while ids are
        under the cap (ids are kept for the process's life, so once the cap
        is reached every new id overflows), else the overflow series."""
        ns, crdt_id, op_type = key
        pair = (ns, crdt_id)
        if pair not in self.ids:
            if len(self.ids) >= self.max_ids:
                self.folded.add(pair)
                key = (self._overflow_ns(ns), OVERFLOW_CRDT_ID, op_type)
                cell = self.series.get(key)
                if cell is None:
                    cell = self.series[key] = [0]
                    self.created[key] = time.time()
                return cell
            self.ids.add(pair)
        cell = self.series[key] = [0]
        self.created[key] = time.time()
        self.cells[key] = cell
        return cell

    def _overflow_ns(self, ns: str) -> str:
        """The ``ns`` label of the overflow series of ``ns``."""
        folded_ns = self.folded_ns
        if ns in folded_ns:
            return ns
        if len(folded_ns) >= MAX_NAMESPACE_SERIES:
            return OTHER_NAMESPACES
        folded_ns.add(ns)
        return ns

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily("service_ops_total", OPS_DOC, labels=list(OPS_LABELS))
        created = self.created
        for key, cell in list(self.series.items()):
            family.add_metric(list(key), cell[0], created=created[key])
        return family


class HotCounters(Collector):
    """The per-op and per-request counters, exposed at scrape time."""

    def __init__(self, max_crdt_series: int = DEFAULT_MAX_CRDT_SERIES) -> None:
        self.ops = OpCounts(max_crdt_series)
        """(ns, crdt_id, op_type) -> ops applied (durable), crdt_id values capped."""
        self.count_op: Callable[[str, str, str], None] = self.ops.count
        """Count one durable op: ``count_op(ns, crdt_id, op_type)``."""
        self.merge: dict[str, MergeHistogram] = {}
        self.wal = WalCounter()
        self.http = LabelledCounts()
        """HTTP status -> answers."""
        self.http_response = self.http.inc
        self.requests = RequestLatency()
        self.commits = Buckets(COMMIT_BUCKETS)

    def merge_histogram(self, ns: str) -> MergeHistogram:
        """The namespace's histogram, or past :data:`MAX_NAMESPACE_SERIES`
        namespaces the one they share (``ns="#other"``); callers keep it to
        observe without a look-up."""
        merge = self.merge
        histogram = merge.get(ns)
        if histogram is None:
            own = len(merge) - (OTHER_NAMESPACES in merge)
            key = ns if own < MAX_NAMESPACE_SERIES else OTHER_NAMESPACES
            histogram = merge.get(key)
            if histogram is None:
                histogram = merge[key] = MergeHistogram()
        return histogram

    def describe(self) -> Iterator[Metric]:
        # Names only, so the registry can refuse a clash at registration.
        yield CounterMetricFamily("service_ops_total", OPS_DOC, labels=list(OPS_LABELS))
        yield CounterMetricFamily("service_ops_overflow_crdts_total", OVERFLOW_DOC)
        yield CounterMetricFamily("service_wal_entries_total", WAL_DOC)
        yield HistogramMetricFamily("service_merge_duration_seconds", MERGE_DOC, labels=["ns"])
        yield CounterMetricFamily("service_http_requests_total", HTTP_DOC, labels=["status"])
        yield HistogramMetricFamily(
            "service_http_request_duration_seconds", REQUEST_DOC, labels=["route", "status"]
        )
        yield HistogramMetricFamily("service_store_commit_seconds", COMMIT_DOC)

    def collect(self) -> Iterator[Metric]:
        ops = self.ops
        yield ops.family()
        yield CounterMetricFamily(
            "service_ops_overflow_crdts_total", OVERFLOW_DOC, value=len(ops.folded)
        )
        wal = self.wal
        yield CounterMetricFamily(
            "service_wal_entries_total", WAL_DOC, value=wal.value, created=wal.created
        )
        merge = HistogramMetricFamily("service_merge_duration_seconds", MERGE_DOC, labels=["ns"])
        for ns, histogram in list(self.merge.items()):
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for label, count in zip(_BUCKET_LABELS, histogram.counts, strict=True):
                cumulative += count
                buckets.append((label, cumulative))
            merge.add_metric([ns], buckets, histogram.total)
            merge.samples.append(
                Sample("service_merge_duration_seconds_created", {"ns": ns}, histogram.created)
            )
        yield merge
        yield self.http.family("service_http_requests_total", HTTP_DOC, ["status"])
        yield self.requests.family()
        commits = HistogramMetricFamily("service_store_commit_seconds", COMMIT_DOC)
        self.commits.add_to(commits, {})
        yield commits


class StatsCollector(Collector):
    """Counters read from a stats object's fields when scraped (a table of
    (field, metric, help), such as ``STORE_COUNTERS``)."""

    def __init__(
        self, stats: Callable[[], object], counters: tuple[tuple[str, str, str], ...]
    ) -> None:
        self._stats = stats
        self._counters = counters

    def describe(self) -> Iterator[Metric]:
        for _, name, doc in self._counters:
            yield CounterMetricFamily(name, doc)

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        for field, name, doc in self._counters:
            yield CounterMetricFamily(name, doc, value=getattr(stats, field))


RESIDENCY_COUNTERS: Final = (
    ("loads", "service_engine_loads_total", "CRDTs read from the store into memory"),
    ("misses", "service_engine_load_misses_total", "Loads of ids the store does not hold"),
    ("evictions", "service_engine_evictions_total", "CRDTs let go from memory (budget)"),
)


class ResidentCollector(Collector):
    """The engine's resident CRDTs and their estimated bytes, read when scraped."""

    def __init__(self, resident: Callable[[], tuple[int, int]]) -> None:
        self._resident = resident

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        count, size = self._resident()
        yield GaugeMetricFamily("service_engine_resident_crdts", "CRDTs in memory", value=count)
        yield GaugeMetricFamily(
            "service_engine_resident_bytes",
            "Estimated memory of the CRDTs in memory (what the budget bounds)",
            value=size,
        )


class UsageSummary(Protocol):
    """What a store keeps up to date of its namespaces' usage as it changes
    (``Catalogue`` in syncd/store/catalogue.py), so that a scrape reads it
    without walking every namespace. Usages are ``Usage``: ``.crdts`` and
    ``.bytes``."""

    def usage_total(self) -> tuple[int, Any]:
        """How many namespaces hold a CRDT, and their usages summed."""
        ...

    def largest_usages(self, k: int) -> list[tuple[str, Any]]:
        """At most ``k`` namespaces with the most bytes, and their usages."""
        ...


NAMESPACES_DOC: Final = (
    "Namespaces that hold a live CRDT (on PostgreSQL: of those this node used lately)"
)


class UsageCollector(Collector):
    """Each namespace's live CRDTs and bytes (the quotas), read when scraped:
    the :data:`MAX_NAMESPACE_SERIES` largest by bytes under their own ``ns``,
    the rest summed under ``ns="#other"``, and ``service_namespaces``.

    With a ``summary`` (running totals and a short list of the largest, kept
    by the store as usages change), a scrape costs the same however many
    namespaces there are. Without one it walks ``usages()``, every
    namespace, once per scrape: 0.5 s of the event loop at a million."""

    def __init__(
        self,
        usages: Callable[[], Mapping[str, Any]],
        max_series: int,
        summary: UsageSummary | None = None,
    ) -> None:
        self._usages = usages
        self._max = max_series
        self._summary = summary

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        crdts = GaugeMetricFamily(
            "service_namespace_crdts", "Live CRDTs per namespace", labels=["ns"]
        )
        size = GaugeMetricFamily(
            "service_namespace_bytes",
            "Sum of the namespace's CRDT sizes (what SERVICE_NAMESPACE_MAX_BYTES bounds)",
            labels=["ns"],
        )
        if self._summary is not None:
            namespaces = self._from_summary(self._summary, crdts, size)
        else:
            namespaces = self._from_every_usage(crdts, size)
        yield crdts
        yield size
        yield GaugeMetricFamily("service_namespaces", NAMESPACES_DOC, value=namespaces)

    def _from_summary(
        self, summary: UsageSummary, crdts: GaugeMetricFamily, size: GaugeMetricFamily
    ) -> int:
        """Fill the gauges from ``summary``: O(:data:`MAX_NAMESPACE_SERIES`);
        returns the number of namespaces."""
        shown = summary.largest_usages(self._max)
        namespaces, total = summary.usage_total()
        for ns, usage in shown:
            crdts.add_metric([ns], usage.crdts)
            size.add_metric([ns], usage.bytes)
        if namespaces > len(shown):
            crdts.add_metric(
                [OTHER_NAMESPACES], total.crdts - sum(usage.crdts for _, usage in shown)
            )
            size.add_metric(
                [OTHER_NAMESPACES], total.bytes - sum(usage.bytes for _, usage in shown)
            )
        return namespaces

    def _from_every_usage(self, crdts: GaugeMetricFamily, size: GaugeMetricFamily) -> int:
        """Fill the gauges from ``usages()``, every namespace; returns how many."""
        usages = self._usages()
        # The largest by bytes, in one pass (ties in the mapping's order, as
        # a stable sort keeps them): a scrape runs in the event loop, and
        # sorting every namespace, then summing the rest in that scattered
        # order, cost some sixty passes over them (0.6 s per scrape with
        # 300,000 namespaces, 4 s with a million).
        shown = heapq.nlargest(self._max, usages.items(), key=_by_bytes)
        for ns, usage in shown:
            crdts.add_metric([ns], usage.crdts)
            size.add_metric([ns], usage.bytes)
        if len(usages) > len(shown):
            total_crdts = total_bytes = 0
            for usage in usages.values():
                total_crdts += usage.crdts
                total_bytes += usage.bytes
            crdts.add_metric(
                [OTHER_NAMESPACES], total_crdts - sum(usage.crdts for _, usage in shown)
            )
            size.add_metric(
                [OTHER_NAMESPACES], total_bytes - sum(usage.bytes for _, usage in shown)
            )
        return len(usages)


def _by_bytes(item: tuple[str, Any]) -> Any:
    return item[1].bytes


class ConnectionCollector(Collector):
    """Open connections (HTTP and upgraded), counted as the limit counts them."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "service_connections_open",
            "Open connections, HTTP and WebSocket: what SERVICE_MAX_CONNECTIONS bounds",
            value=self._count(),
        )


class StateCollector(Collector):
    """One gauge per state of something, labelled ``state``: 1 for the state it
    is in now (read when scraped), 0 for the others, so an alert can test a
    state by name and a graph shows when it changed."""

    def __init__(
        self, name: str, doc: str, state: Callable[[], str], states: tuple[str, ...]
    ) -> None:
        self._name = name
        self._doc = doc
        self._state = state
        self._states = states

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self._name, self._doc, labels=["state"])

    def collect(self) -> Iterator[Metric]:
        now = self._state()
        family = GaugeMetricFamily(self._name, self._doc, labels=["state"])
        for state in self._states:
            family.add_metric([state], 1.0 if state == now else 0.0)
        yield family


TLS_EXPIRY_DOC: Final = (
    "When the TLS certificate being served (SERVICE_TLS_CERT's first) expires: "
    "its notAfter in unix time, read at the start and at each reload"
)


class TlsExpiryCollector(Collector):
    """``service_tls_certificate_expiry_timestamp_seconds``, read when scraped;
    no sample while ``not_after()`` is None (the dates could not be read)."""

    def __init__(self, not_after: Callable[[], float | None]) -> None:
        self._not_after = not_after

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("service_tls_certificate_expiry_timestamp_seconds", TLS_EXPIRY_DOC)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "service_tls_certificate_expiry_timestamp_seconds", TLS_EXPIRY_DOC
        )
        value = self._not_after()
        if value is not None:
            family.add_metric([], value)
        yield family


WAL_STREAM_DOC: Final = (
    "The replication stream (SERVICE_WAL_CONNSTR): 1 for the state it is in "
    "(off: not configured; connecting: configured, not streaming now; streaming)"
)


class Metrics:
    def __init__(self, *, max_crdt_series: int = DEFAULT_MAX_CRDT_SERIES) -> None:
        """``max_crdt_series``: CRDT ids given ``service_ops_total`` series of
        their own (``SERVICE_METRICS_MAX_CRDT_SERIES``); 0 counts every op
        under the overflow value."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.hot = HotCounters(max_crdt_series)
        r.register(self.hot)
        self.wal_entries_total = self.hot.wal
        """``inc(n)`` per durable batch (the stores' ``on_written``)."""
        self.ws_connections_active = Gauge(
            "service_ws_connections_active", "Active WebSocket connections", registry=r
        )
        self.subscriptions_active = Gauge(
            "service_subscriptions_active", "Active WebSocket subscription receivers", registry=r
        )
        self.webhook_deliveries_total = Counter(
            "service_webhook_deliveries_total",
            "Webhook delivery attempts by result (ok, retry, failed)",
            ["result"],
            registry=r,
        )
        self.webhook_dropped_total = Counter(
            "service_webhook_dropped_total",
            "Webhook events dropped (queue full, retries spent, or still queued at shutdown)",
            registry=r,
        )
        self.webhook_queue_depth = Gauge(
            "service_webhook_queue_depth", "Webhook events waiting for delivery", registry=r
        )
        self.sse_connections_active = Gauge(
            "service_sse_connections_active", "Active SSE streams", registry=r
        )
        self.http_response = self.hot.http_response
        """Count one HTTP answer by status (``service_http_requests_total``)."""
        self.http_request = self.hot.requests.observe
        """``http_request(route_class, status, seconds)``: one answered request
        (``service_http_request_duration_seconds``)."""
        self.store_commit = self.hot.commits.observe
        """``store_commit(seconds)`` per durable group commit (the stores' ``on_commit``)."""

    def watch_store(self, stats: Callable[[], object]) -> None:
        """Export the store's counters (see ``STORE_COUNTERS``) from ``stats()``."""
        self.registry.register(StatsCollector(stats, STORE_COUNTERS))

    def watch_residency(
        self,
        stats: Callable[[], object],
        resident: Callable[[], tuple[int, int]],
        budget_bytes: int,
    ) -> Callable[[float], None]:
        """Export which CRDTs are in memory: ``RESIDENCY_COUNTERS`` from
        ``stats()``, gauges of ``resident()`` (count, estimated bytes) and the
        budget; returns what to call with each load's seconds."""
        r = self.registry
        r.register(StatsCollector(stats, RESIDENCY_COUNTERS))
        r.register(ResidentCollector(resident))
        Gauge(
            "service_engine_memory_budget_bytes",
            "SERVICE_MEMORY_BUDGET_MB, in bytes: the bound on resident CRDT state",
            registry=r,
        ).set(budget_bytes)
        seconds = Histogram(
            "service_engine_load_seconds",
            "Time to read one CRDT from the store into memory",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        return seconds.observe

    def watch_usage(
        self,
        usages: Callable[[], Mapping[str, Any]],
        limits: Mapping[str, int],
        summary: UsageSummary | None = None,
    ) -> None:
        """Per-namespace usage gauges (read when scraped; from ``summary``
        when the store keeps one, so a scrape does not walk every namespace)
        and the quota limits (``limits``: setting name -> value; 0 is no
        limit)."""
        r = self.registry
        r.register(UsageCollector(usages, MAX_NAMESPACE_SERIES, summary))
        quota = Gauge(
            "service_quota_limit",
            "A quota setting (0: no limit), by its name",
            ["setting"],
            registry=r,
        )
        for name, value in limits.items():
            quota.labels(setting=name).set(value)

    def build_info(self, **labels: str) -> None:
        """``service_build_info{...} 1``: which version and parts this process runs."""
        Gauge(
            "service_build_info",
            "Always 1; the labels say what runs: version, Python, HTTP parser, store",
            sorted(labels),
            registry=self.registry,
        ).labels(**labels).set(1)

    def watch_connections(self, count: Callable[[], int], limit: int) -> None:
        """``service_connections_open`` (read when scraped) and the limit it is
        held to, ``service_connections_max`` (SERVICE_MAX_CONNECTIONS)."""
        r = self.registry
        r.register(ConnectionCollector(count))
        Gauge(
            "service_connections_max",
            "SERVICE_MAX_CONNECTIONS: open connections past which new ones get 503",
            registry=r,
        ).set(limit)

    def watch_cluster(self, stats: Callable[[], object]) -> None:
        """Export the replication layer's counters (see ``CLUSTER_COUNTERS``)."""
        self.registry.register(StatsCollector(stats, CLUSTER_COUNTERS))

    def watch_tls_certificate(self, not_after: Callable[[], float | None]) -> None:
        """``service_tls_certificate_expiry_timestamp_seconds``: the served
        certificate's notAfter, ``not_after()`` when scraped (so a reload shows)."""
        self.registry.register(TlsExpiryCollector(not_after))

    def watch_wal_stream(self, state: Callable[[], str], states: tuple[str, ...]) -> None:
        """``service_cluster_wal_stream_state{state}``: which of ``states`` the
        replication stream is in, read from ``state()`` when scraped."""
        self.registry.register(
            StateCollector("service_cluster_wal_stream_state", WAL_STREAM_DOC, state, states)
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
