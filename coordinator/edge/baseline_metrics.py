"""ringleader_baseline_regressions_total{op, link}: regression events (coordinator/health/baselines.py),
read from the store when Prometheus scrapes, so the count survives a coordinator restart and no
object calls another back. Every (op, link) series exists from the start at 0: an alert on
increase() then sees the first regression (a series born at 1 shows no increase)."""

from __future__ import annotations

from typing import Iterable

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from coordinator.store.api import JobStore
from ringleader import spec

LINKS = ("local", "cross")


class BaselineRegressionsCollector(Collector):
    def __init__(self, store: JobStore) -> None:
        self.store = store

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily("ringleader_baseline_regressions",
                                   "Regression events: results repeatedly below their baseline by more than "
                                   "its noise justifies, by op and link kind (one host or across hosts)",
                                   labels=["op", "link"])

    def describe(self) -> Iterable:
        return [self._family()]

    def collect(self) -> Iterable:
        counts = {(op, link): 0 for op in spec.OPS for link in LINKS}
        for e in self.store.baselines():
            if (e.op, e.link) in counts:  # imported entries are validated; this keeps labels bounded anyway
                counts[(e.op, e.link)] += e.regressions
        fam = self._family()
        for (op, link), n in sorted(counts.items()):
            fam.add_metric([op, link], n)
        return [fam]
