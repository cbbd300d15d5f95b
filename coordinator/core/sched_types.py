"""What the scheduler (coordinator/core/scheduler.py) takes and gives: a job's `Need` of its
workers, a queued `PendingJob`, a `Decision` to start one, a one-shot `Plan`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from coordinator.core.sched_index import Kind, WorkerView
from ringleader import spec as specs
from ringleader.jobspec import ValidJob

AGING_S = 60.0


@dataclass(frozen=True)
class Need:
    """What a job needs of its workers; jobs with equal needs are interchangeable."""

    world_size: int
    backends: frozenset[str] = frozenset(specs.BACKENDS)  # the backends that can run it
    needs_bytes: int = 0  # device bytes per rank for the largest size
    host: str = ""
    gpu_model: str = ""
    worker_ids: tuple[str, ...] = ()
    device_type: str = ""

    @cached_property
    def listed_at(self) -> dict[str, int]:
        """Each listed worker's place in `worker_ids`."""
        return {wid: i for i, wid in enumerate(self.worker_ids)}

    def fits(self, kind: Kind) -> bool:
        """Whether workers of this kind are eligible (host and ids aside; quarantined: if named)."""
        backend, device_type, name, memory, quarantined, _ = kind
        return (not (quarantined and not self.worker_ids) and backend in self.backends
                and (not self.device_type or device_type == self.device_type)
                and (not self.gpu_model or self.gpu_model.lower() in name.lower())
                and not (memory and self.needs_bytes > memory))

    def admits(self, w: WorkerView) -> bool:
        return (self.fits(w.kind) and (not self.host or w.host == self.host)
                and (not self.worker_ids or w.worker_id in self.listed_at))

    def constraints(self) -> str:
        parts = [f"{k}={v}" for k, v in (("host", self.host), ("gpu_model", self.gpu_model),
                                         ("device_type", self.device_type)) if v]
        if ids := self.worker_ids:  # a fleet-wide check names thousands: the first few and how many
            parts.append("worker_ids=" + ",".join(ids[:8]) + (f",... ({len(ids)} in all)" if len(ids) > 8 else ""))
        return f" matching {' '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    priority: int
    submitted_at: float
    need: Need

    @classmethod
    def of(cls, job_id: str, valid: ValidJob, submitted_at: float) -> "PendingJob":
        s, p = valid.spec, valid.spec.placement
        return cls(job_id, s.priority, submitted_at, Need(
            s.world_size, frozenset(b for b in specs.BACKENDS if valid.runs_on(b)), valid.needs_bytes,
            p.host, p.gpu_model, tuple(p.worker_ids), p.device_type))

    @property
    def world_size(self) -> int:
        return self.need.world_size

    @property
    def order(self) -> tuple[float, float, str]:
        """Queue order, smallest first: ordering by priority + waited / AGING_S at any one moment
        is ordering by this, which does not change while the job waits."""
        return (self.submitted_at - AGING_S * self.priority, self.submitted_at, self.job_id)


@dataclass(frozen=True)
class Decision:
    job_id: str
    worker_ids: tuple[str, ...]  # in rank order
    backend: str
    warm_group: str  # the reused group's key, or "" for a new group


@dataclass
class Plan:
    decisions: list[Decision] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)  # job_id -> why it still waits
