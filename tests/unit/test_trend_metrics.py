"""The trend gauges (coordinator/edge/trend_metrics.py): recent results per key's fields against the
band, folded over the key fields that are not labels, read from a real store at scrape time."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.edge.trend_metrics import TrendCollector
from coordinator.health import baselines
from coordinator.store.memory import MemoryJobStore
from coordinator.store.trends import HOUR_S, TrendPoint
from ringleader.v1 import jobs_pb2 as pb

NOW = 1_800_000_000.0


def entry(dtype: str, samples: int) -> pb.BaselineEntry:
    e = pb.BaselineEntry(gpu_model="H100", op="all_reduce", dtype=dtype, size_bucket=1 << 20, ranks=8, hosts=1,
                         link="local", mode="eager", samples=[100.0] * samples)
    e.key = baselines.entry_key(e)
    baselines.recompute(e)
    return e


def scrape(store) -> dict:
    registry = CollectorRegistry()
    registry.register(TrendCollector(store, clock=lambda: NOW))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_recent_results_are_folded_per_label_set_with_the_band():
    store = MemoryJobStore()
    a, b = entry("float32", 50), entry("bfloat16", 10)
    for e in (a, b):
        store.put_baseline(e)
    point = lambda e, at, v: TrendPoint(key=e.key, gpu_model="H100", op="all_reduce", link="local",  # noqa: E731
                                        at=at, busbw_gbps=v, job_id="j", hosts=("h",))
    store.add_trend(point(a, NOW - 10, 90.0))
    store.add_trend(point(b, NOW - HOUR_S, 60.0))  # last complete hour: counted
    store.add_trend(point(a, NOW - 3 * HOUR_S, 1.0))  # older: not
    got = scrape(store)
    labels = (("gpu_model", "H100"), ("link", "local"), ("op", "all_reduce"), ("ranks", "8"), ("size_bucket", "1048576"))
    assert got[("ringleader_busbw_trend_gbps", tuple(sorted(labels + (("stat", "mean"),))))] == 75.0
    assert got[("ringleader_busbw_trend_gbps", tuple(sorted(labels + (("stat", "min"),))))] == 60.0
    # The band of the key with the most samples (a: 50).
    assert got[("ringleader_busbw_baseline_gbps", tuple(sorted(labels + (("bound", "median"),))))] == 100.0
    assert got[("ringleader_busbw_baseline_gbps", tuple(sorted(labels + (("bound", "threshold"),))))] \
        == baselines.threshold(a)
    assert len([k for k in got if k[0] == "ringleader_busbw_trend_gbps"]) == 2


def test_an_empty_store_exports_no_series():
    assert not [k for k in scrape(MemoryJobStore()) if k[0].startswith("ringleader_busbw_")]


def test_a_prefetched_scrape_shows_the_trends_read_beforehand_and_only_once():
    store = MemoryJobStore()
    a = entry("float32", 50)
    store.put_baseline(a)
    collector = TrendCollector(store, clock=lambda: NOW)
    registry = CollectorRegistry()
    registry.register(collector)
    asyncio.run(collector.prefetch())  # read off the loop: nothing there yet
    store.add_trend(TrendPoint(key=a.key, gpu_model="H100", op="all_reduce", link="local", at=NOW - 10,
                               busbw_gbps=90.0, job_id="j", hosts=("h",)))
    series = lambda: [s for fam in text_string_to_metric_families(generate_latest(registry).decode())  # noqa: E731
                      for s in fam.samples if s.name == "ringleader_busbw_trend_gbps"]
    assert series() == []  # the rows read by prefetch, not the store's newer ones
    assert [s.value for s in series()] == [90.0, 90.0]  # the next scrape, not prefetched, reads the store
