"""The worker relay's metrics (coordinator/edge/relay_host.py), read at each scrape: whether its
link is up, how many workers' streams it carries, how often it was started again, and how many
heartbeats crossed batched."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class RelayCollector(Collector):
    def __init__(self, host) -> None:
        self.host = host

    def collect(self):
        host = self.host
        yield GaugeMetricFamily("ringleader_worker_relay_up", "1 while the worker relay's link is up, else 0",
                                value=1.0 if host.proto is not None else 0.0)
        yield GaugeMetricFamily("ringleader_worker_relay_streams", "Workers' streams the relay carries now",
                                value=float(host.streams))
        yield CounterMetricFamily("ringleader_worker_relay_restarts",
                                  "Times the worker relay was started again after its link ended",
                                  value=float(host.restarts))
        yield CounterMetricFamily("ringleader_worker_relay_alive_heartbeats",
                                  "Heartbeats that came again unchanged and crossed the relay's link batched (ALIVE)",
                                  value=float(host.alive))
