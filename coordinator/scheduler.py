"""Gang scheduling: which queued jobs start now, on which workers, in which rank order.

A pure function of the queue and the fleet, so it is tested without servers. Rules:
- a job is placed whole (world_size idle eligible workers of one backend) or not at all;
- queue order is priority, raised by one level per AGING_S waited, then submission order;
- a job that cannot start now but could on the registered fleet reserves the eligible idle
  workers it sees, so later (smaller) jobs cannot starve it; a job larger than the fleet
  reserves nothing and blocks nobody;
- a gang equal to a warm group (every member's executor holds the same initialised process
  group, coordinator/groups.py) is preferred and keeps that group's rank order, so the job
  starts without a new NCCL init;
- ranks on one host are adjacent (sorted by host, then device index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ringleader import spec as specs
from ringleader.jobspec import ValidJob

AGING_S = 60.0


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    host: str
    device_type: str
    device_index: int
    device_name: str
    memory_bytes: int
    backend: str
    idle: bool


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    world_size: int
    priority: int
    submitted_at: float
    backends: frozenset[str] = frozenset(specs.BACKENDS)  # the backends that can run it
    needs_bytes: int = 0  # device bytes per rank for the largest size
    host: str = ""
    gpu_model: str = ""
    worker_ids: tuple[str, ...] = ()
    device_type: str = ""

    @classmethod
    def of(cls, job_id: str, valid: ValidJob, submitted_at: float) -> "PendingJob":
        s, p = valid.spec, valid.spec.placement
        return cls(job_id=job_id, world_size=s.world_size, priority=s.priority, submitted_at=submitted_at,
                   backends=frozenset(b for b in specs.BACKENDS if valid.runs_on(b)),
                   needs_bytes=valid.needs_bytes, host=p.host, gpu_model=p.gpu_model,
                   worker_ids=tuple(p.worker_ids), device_type=p.device_type)


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


def eligible(job: PendingJob, w: WorkerView) -> bool:
    if job.host and w.host != job.host:
        return False
    if job.gpu_model and job.gpu_model.lower() not in w.device_name.lower():
        return False
    if job.worker_ids and w.worker_id not in job.worker_ids:
        return False
    if job.device_type and w.device_type != job.device_type:
        return False
    if w.memory_bytes and job.needs_bytes > w.memory_bytes:
        return False
    return w.backend in job.backends


def queue_order(jobs: list[PendingJob], now: float) -> list[PendingJob]:
    def key(j: PendingJob):
        return (-(j.priority + (now - j.submitted_at) / AGING_S), j.submitted_at, j.job_id)

    return sorted(jobs, key=key)


def _rank_order(workers: list[WorkerView]) -> tuple[str, ...]:
    return tuple(w.worker_id for w in sorted(workers, key=lambda w: (w.host, w.device_index, w.worker_id)))


def _pick(job: PendingJob, idle: list[WorkerView], warm_groups: dict[str, tuple[str, ...]]) -> Decision | None:
    by_backend: dict[str, list[WorkerView]] = {}
    for w in idle:
        by_backend.setdefault(w.backend, []).append(w)
    # Prefer a warm group of exactly the right size: no new process-group init.
    ids = {w.worker_id: w for w in idle}
    for key, members in warm_groups.items():
        if len(members) == job.world_size and all(m in ids for m in members):
            if len({ids[m].backend for m in members}) == 1:
                return Decision(job.job_id, members, ids[members[0]].backend, key)
    for backend in specs.BACKENDS:
        pool = by_backend.get(backend, [])
        if len(pool) < job.world_size:
            continue
        # Pack onto the hosts with the most idle workers so ranks share hosts where possible.
        per_host: dict[str, list[WorkerView]] = {}
        for w in pool:
            per_host.setdefault(w.host, []).append(w)
        hosts = sorted(per_host, key=lambda h: (-len(per_host[h]), h))
        chosen: list[WorkerView] = []
        for h in hosts:
            for w in sorted(per_host[h], key=lambda w: (w.device_index, w.worker_id)):
                if len(chosen) < job.world_size:
                    chosen.append(w)
        return Decision(job.job_id, _rank_order(chosen), backend, "")
    return None


def _constraints(job: PendingJob) -> str:
    parts = [f"{k}={v}" for k, v in (("host", job.host), ("gpu_model", job.gpu_model),
                                     ("device_type", job.device_type)) if v]
    if job.worker_ids:
        parts.append("worker_ids=" + ",".join(job.worker_ids))
    return f" matching {' '.join(parts)}" if parts else ""


def plan(queue: list[PendingJob], fleet: list[WorkerView], now: float,
         groups: dict[str, tuple[str, ...]] | None = None) -> Plan:
    """Decide which queued jobs start now. `fleet` is every connected worker, idle or busy;
    `groups` the warm groups a job may reuse (key -> members in rank order)."""
    result = Plan()
    free = {w.worker_id: w for w in fleet if w.idle}
    groups = groups or {}
    for job in queue_order(queue, now):
        idle = [w for w in free.values() if eligible(job, w)]
        decision = _pick(job, idle, groups) if len(idle) >= job.world_size else None
        if decision:
            result.decisions.append(decision)
            for wid in decision.worker_ids:
                free.pop(wid)
            continue
        matching = [w for w in fleet if eligible(job, w)]
        if len(matching) >= job.world_size:
            # Feasible later: hold what it can use now, so smaller jobs cannot starve it.
            for w in idle:
                free.pop(w.worker_id, None)
            result.waiting[job.job_id] = f"needs {job.world_size} workers, {len(idle)} idle{_constraints(job)}"
        else:
            result.waiting[job.job_id] = (
                f"needs {job.world_size} workers, {len(matching)} connected{_constraints(job)}"
            )
    return result
