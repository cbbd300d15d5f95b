"""Prometheus metrics of the coordinator (served at /metrics by the dashboard app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from coordinator.core import Coordinator
from ringleader.v1 import jobs_pb2 as pb


class CoordinatorMetrics:
    def __init__(self, core: Coordinator) -> None:
        self.registry = CollectorRegistry()
        self.job_transitions = Counter("ringleader_job_transitions_total", "Job state changes, by new state",
                                       ["state"], registry=self.registry)
        core.add_listener(self._on_event)

    def _on_event(self, event: pb.JobEvent, job: pb.Job) -> None:
        if event.WhichOneof("event") == "state":
            self.job_transitions.labels(pb.JobState.Name(event.state.state).lower()).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
