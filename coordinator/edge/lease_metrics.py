"""Leadership metrics of a coordinator on PostgreSQL (coordinator/store/lease.py), read from the
lease at each scrape: who leads (1 here, 0 on a standby), since when, and failovers counted.
Register a LeaseCollector on the leader's CoordinatorMetrics registry, or on a standby's own."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.store.lease import Lease


class LeaseCollector(Collector):
    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def collect(self):
        lease = self.lease
        leader = GaugeMetricFamily("ringleader_leader", "1 while this coordinator holds the leader lease, else 0",
                                   labels=["holder"])
        leader.add_metric([lease.holder], 1.0 if lease.leading else 0.0)
        yield leader
        yield GaugeMetricFamily("ringleader_leader_since_seconds",
                                "Unix time (the database's clock) this coordinator became leader; 0 if it is not",
                                value=lease.since if lease.leading else 0.0)
        yield GaugeMetricFamily("ringleader_lease_token", "Fencing token of this coordinator's lease (0: never led)",
                                value=float(lease.token))
        yield CounterMetricFamily("ringleader_failovers", "Times this coordinator took the lease over from an earlier leader",
                                  value=float(lease.failovers))
