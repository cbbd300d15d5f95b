"""The coordinator's load (coordinator/core/load.py) as metrics, read at each scrape: how late its
event loop runs, calls refused while saturated, worker messages that waited for a later turn and
how long they waited, the loop's stalls."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.core.load import IntakeGate, LagMeter
from coordinator.shell.stallwatch import StallWatch


class LoadCollector(Collector):
    def __init__(self, lag: LagMeter, intake: IntakeGate, stalls: StallWatch) -> None:
        self.lag, self.intake, self.stalls = lag, intake, stalls

    def collect(self):
        yield GaugeMetricFamily("ringleader_loop_lag_seconds",
                                "How late the coordinator's event loop runs a timer (the worst of the last second); "
                                "calls that add work are refused past --shed-lag", value=self.lag.lag_s())
        yield CounterMetricFamily("ringleader_calls_shed", "Calls refused (RESOURCE_EXHAUSTED / 429) while saturated",
                                  value=float(self.lag.shed))
        yield CounterMetricFamily("ringleader_worker_messages_deferred",
                                  "Worker messages applied in a later turn of the loop (--worker-msgs-per-turn)",
                                  value=float(self.intake.deferred))
        yield GaugeMetricFamily("ringleader_worker_message_wait_seconds",
                                "How long worker messages (heartbeats, results) waited between the edge and their "
                                "turn on the core: the worst of the last second", value=self.intake.waits.worst())
        yield CounterMetricFamily("ringleader_loop_stalls",
                                  "Stalls of the event loop past --stall-warn (each named in the log: its garbage "
                                  "collection and the loop's stack)", value=float(self.stalls.stalls))
