"""The bandwidth trends (coordinator/store/trends.py) as Prometheus gauges, read from the store when
Prometheus scrapes; Prometheus keeps the history, Grafana draws it (deploy/grafana):

  ringleader_busbw_trend_gbps{gpu_model, op, size_bucket, ranks, link, stat="mean"|"min"}
      busbw of the results of the last complete hour and the current one
  ringleader_busbw_baseline_gbps{gpu_model, op, size_bucket, ranks, link, bound="median"|"threshold"}
      the baseline band those results are judged against (coordinator/health/baselines.py)

Low cardinality: the labels are the baseline key's fields an operator watches (dtype, hosts, mode
and algo are folded: a mean weighted by results, the lowest min, the band of the key with the most
samples), and at most MAX_SERIES label sets are exported.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.health import baselines
from coordinator.store.api import JobStore
from coordinator.store.trends import HOUR_S, TrendQuery

MAX_SERIES = 500
LABELS = ["gpu_model", "op", "size_bucket", "ranks", "link"]


def labels_of(e) -> tuple[str, ...]:
    return (e.gpu_model, e.op, str(e.size_bucket), str(e.ranks), e.link)


class TrendCollector(Collector):
    def __init__(self, store: JobStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._read_ahead: list | None = None  # the next scrape's trend buckets, read by `prefetch`

    async def prefetch(self) -> None:
        """Read the next scrape's trends on another thread: on the PostgreSQL store they come from
        its server, which the coordinator's loop never waits for."""
        self._read_ahead = await asyncio.get_running_loop().run_in_executor(None, self._recent)

    def _recent(self) -> list:
        now = self.clock()
        since = (now // HOUR_S - 1) * HOUR_S
        return self.store.trend(TrendQuery(since=since, until=now + 1, step_s=2 * HOUR_S))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily("ringleader_busbw_trend_gbps", "Busbw of recent results (last complete hour and "
                                  "this one) per baseline key's fields, GB/s", labels=[*LABELS, "stat"]),
                GaugeMetricFamily("ringleader_busbw_baseline_gbps", "The baseline band recent results are judged "
                                  "against: its median and the threshold below which a result is low, GB/s",
                                  labels=[*LABELS, "bound"]))

    def describe(self) -> Iterable:
        return list(self._families())

    def collect(self) -> Iterable:
        trend, band = self._families()
        entries = {e.key: e for e in self.store.baselines()}
        recent, self._read_ahead = self._read_ahead if self._read_ahead is not None else self._recent(), None
        folded: dict[tuple[str, ...], list[float]] = {}  # labels -> [n, total, min]
        bands: dict[tuple[str, ...], tuple[int, float, float]] = {}  # labels -> (samples, median, threshold)
        for b in recent:
            e = entries.get(b.key)
            if e is None:
                continue  # every trend key has a baseline entry (its row was judged against it)
            lab = labels_of(e)
            if lab not in folded and len(folded) >= MAX_SERIES:
                continue
            f = folded.setdefault(lab, [0, 0.0, float("inf")])
            f[0] += b.n
            f[1] += b.mean_gbps * b.n
            f[2] = min(f[2], b.min_gbps)
            if len(e.samples) > bands.get(lab, (-1,))[0]:
                bands[lab] = (len(e.samples), e.median_busbw_gbps, baselines.threshold(e))
        for lab, (n, total, low) in sorted(folded.items()):
            trend.add_metric([*lab, "mean"], total / n)
            trend.add_metric([*lab, "min"], low)
            _, median, threshold = bands[lab]
            band.add_metric([*lab, "median"], median)
            band.add_metric([*lab, "threshold"], threshold)
        return [trend, band]
