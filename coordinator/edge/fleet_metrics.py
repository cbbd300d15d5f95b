"""Prometheus gauges of fleet health, computed at scrape time from the health book
(coordinator/health/fleet.py). Labels: the verdict only (three values); no worker id is a label: which
worker is failed is in `ringleader workers` and GET /api/v1/fleet/health. Beside them, a counter of the
fleet- and host-wide expectation findings (coordinator/health/expectations.py), by scope."""

from __future__ import annotations

import time
from typing import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

VERDICTS = ("HEALTHY", "SUSPECT", "UNHEALTHY")  # names of ringleader.v1.Verdict
PARTS = ("software", "topology", "settings")  # of a configuration fingerprint (coordinator/health/fingerprints.py)


class FleetHealthCollector(Collector):
    def __init__(self, fleet) -> None:  # coordinator.health.fleet.FleetHealth
        self.fleet = fleet

    def describe(self) -> Iterable:
        return self._families()

    @staticmethod
    def _families() -> tuple:
        return (GaugeMetricFamily("ringleader_worker_verdicts",
                                  "Checked workers by their last health verdict (healthy, suspect, unhealthy)",
                                  labels=["verdict"]),
                GaugeMetricFamily("ringleader_workers_quarantined",
                                  "Workers kept out of user jobs: failed a check, or cordoned by hand"),
                GaugeMetricFamily("ringleader_quarantine_breaker_held",
                                  "Failed workers the circuit breaker left in service (automatic quarantine at its "
                                  "share of their GPU model, --quarantine-max-share): alert, an operator decides"),
                GaugeMetricFamily("ringleader_worker_config_drift",
                                  "Connected workers configured unlike the others of their backend and device model, "
                                  "by what differs (software, topology, settings): `ringleader workers -o wide` names "
                                  "them", labels=["part"]),
                CounterMetricFamily("ringleader_expectation_findings",
                                    "Checks whose every worker (scope fleet) or every worker of a host (scope host) "
                                    "fell below its expectation alike (history or shipped floor)", labels=["scope"]))

    def collect(self) -> Iterable:
        verdicts, quarantined, held, drift, findings = self._families()
        raised = self.fleet.core.control.expectations.findings
        for scope in ("fleet", "host"):
            findings.add_metric([scope], raised.get(scope, 0))
        counts = self.fleet.book.counts()
        for v in VERDICTS:  # every verdict, zeros included, so an alert sees the first failure
            verdicts.add_metric([v.lower()], counts.get(v, 0))
        quarantined.add_metric([], len(self.fleet.book.quarantined_ids()))
        held.add_metric([], len(self.fleet.book.held_ids()))
        drifting = self.fleet.core.workers.configs.drifting()
        for part in PARTS:
            drift.add_metric([part], drifting.get(part, 0))
        return [verdicts, quarantined, held, drift, findings, *sweep_families(getattr(self.fleet, "sweep_ledger", None))]


def sweep_families(ledger) -> list:
    """The sweep's plan (coordinator/health/sweeper.py SweepLedger): per check kind, how long since
    it last ran on the least recently checked worker a sweep has checked, and how many sweeps
    skipped it (no idle worker at its turn, or its job failed). None before the sweeper starts."""
    if ledger is None:
        return []
    from ringleader import checks

    age = GaugeMetricFamily("ringleader_sweep_kind_age_seconds",
                            "Seconds since a check kind last ran in a sweep on its least recently checked worker",
                            labels=["kind"])
    skips = CounterMetricFamily("ringleader_sweep_skips", "Sweeps that skipped a check kind", labels=["kind"])
    workers = {w for w, _ in ledger.last}
    for kind, seconds, _ in ledger.plan(checks.KINDS, workers, time.monotonic()):
        if seconds != float("inf"):
            age.add_metric([kind], seconds)
        skips.add_metric([kind], ledger.skips.get(kind, 0))
    return [age, skips]


