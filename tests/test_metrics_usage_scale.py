"""The per-namespace usage gauges at many namespaces: a scrape of a store that
keeps a usage summary (the catalogue's board) costs the same at 10,000 and
80,000 namespaces, and names at most MAX_NAMESPACE_SERIES of them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from syncd.metrics import MAX_NAMESPACE_SERIES, OTHER_NAMESPACES, Metrics
from syncd.store.catalogue import Catalogue
from tests.cpu import least_cpu_in_turns


def filled(namespaces: int) -> Catalogue:
    """A catalogue with one or two CRDTs of measured size per namespace."""
    catalogue = Catalogue()
    for i in range(namespaces):
        ns = f"tenant-{i}"
        catalogue.add(ns, "gc:a", "gcounter", (i * 2654435761) % 1_000_003)
        if i % 3 == 0:
            catalogue.add(ns, "lw:b", "lww", 100)
    return catalogue


def watched(catalogue: Catalogue, *, summary: bool = True) -> Metrics:
    metrics = Metrics()
    metrics.watch_usage(catalogue.usages, {}, catalogue if summary else None)
    return metrics


ROUNDS = 5
"""Runs of each side of a comparison, in turns; the least of each is compared."""


def usage_samples(metrics: Metrics) -> dict[tuple[str, str], float]:
    """(family, ns) -> value of the usage gauges in one rendered scrape."""
    return {
        (s.name, s.labels.get("ns", "")): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name.startswith("service_namespace")
        for s in family.samples
    }


def test_a_scrape_costs_the_same_at_10k_and_80k_namespaces() -> None:
    """The whole /metrics body rendered, CPU time, 10,000 namespaces against
    80,000: flat (under 1.5 times) with the store's summary, where walking
    every namespace at each scrape (the collector without one, as before)
    costs several times more at eight times the namespaces."""
    small, large = filled(10_000), filled(80_000)
    with_summary = least_cpu_in_turns([watched(small).render, watched(large).render], ROUNDS)
    walking = least_cpu_in_turns(
        [watched(small, summary=False).render, watched(large, summary=False).render], ROUNDS
    )
    assert with_summary[1] < 1.5 * with_summary[0], with_summary
    assert walking[1] > 3 * walking[0], walking  # the measure can tell
    assert with_summary[1] * 3 < walking[1], (with_summary, walking)


def test_the_gauges_name_the_largest_and_sum_the_rest() -> None:
    """Every namespace named up to MAX_NAMESPACE_SERIES, no "#other"; one more
    (the smallest) and it counts under ns="#other"; the sums always match a
    walk over every namespace, and service_namespaces counts them all."""
    catalogue = Catalogue()
    for i in range(1, MAX_NAMESPACE_SERIES + 1):
        catalogue.add(f"ns{i}", "gc:x", "gcounter", 10 + i)
    metrics = watched(catalogue)
    got = usage_samples(metrics)
    assert (("service_namespace_bytes", OTHER_NAMESPACES)) not in got
    assert got[("service_namespaces", "")] == MAX_NAMESPACE_SERIES
    assert got[("service_namespace_bytes", "ns1")] == 11

    catalogue.add("ns0", "gc:x", "gcounter", 5)
    catalogue.add("ns0", "gc:y", "gcounter", 5)
    got = usage_samples(metrics)
    named = {ns for (name, ns) in got if name == "service_namespace_bytes"}
    assert len(named) == MAX_NAMESPACE_SERIES + 1
    assert "ns0" not in named
    assert got[("service_namespace_bytes", OTHER_NAMESPACES)] == 10
    assert got[("service_namespace_crdts", OTHER_NAMESPACES)] == 2
    assert got[("service_namespaces", "")] == MAX_NAMESPACE_SERIES + 1

    # ns0 grows past the smallest named: it is named, ns1 sums under #other.
    catalogue.note_size("ns0", "gc:x", 1000)
    got = usage_samples(metrics)
    assert got[("service_namespace_bytes", "ns0")] == 1005
    assert ("service_namespace_bytes", "ns1") not in got
    assert got[("service_namespace_bytes", OTHER_NAMESPACES)] == 11
    walked = catalogue.usages().values()
    assert sum(v for (name, _), v in got.items() if name == "service_namespace_bytes") == sum(
        u.bytes for u in walked
    )


def test_without_a_summary_the_gauges_are_the_same() -> None:
    """The walk (stores without a summary) and the summary give one scrape."""
    catalogue = filled(3 * MAX_NAMESPACE_SERIES)
    assert usage_samples(watched(catalogue)) == usage_samples(watched(catalogue, summary=False))
