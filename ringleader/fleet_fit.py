"""Whether the connected fleet can hold a job at all: `submit` refuses one it cannot (a typo in
--world-size or --host would otherwise queue forever, silently) unless the user asks to queue it.

Asked at the edge, from the worker list every user may read (the CLI before submitting, the REST
API before accepting unless the body says `"queue": true`), so the coordinator's admission stays
what it is (a job that fits later is a valid job) and the gRPC spec needs no field. The words
match the scheduler's waiting reason ("needs 8 workers, 2 connected").
"""

from __future__ import annotations

from collections import Counter

from ringleader.errors import InvalidSpec
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb

CONNECTED = (pb.IDLE, pb.BUSY)  # a quarantined worker takes no user job unless the job names it


def _admits(p: pb.Placement, w: pb.WorkerInfo) -> bool:
    return ((not p.host or w.host == p.host) and (not p.device_type or w.device.type == p.device_type)
            and (not p.gpu_model or p.gpu_model.lower() in w.device.name.lower())
            and (not p.worker_ids or w.worker_id in p.worker_ids))


def _constraints(p: pb.Placement) -> str:
    parts = [f"{k}={v}" for k, v in (("host", p.host), ("gpu_model", p.gpu_model), ("device_type", p.device_type)) if v]
    if p.worker_ids:
        parts.append("worker_ids=" + ",".join(p.worker_ids))
    return f" matching {' '.join(parts)}" if parts else ""


def held_back(n: int, usable: int, idle: int, quarantined: int, cordoned: int, where: str) -> str:
    """Why a job waits, or is refused, when some of its eligible workers are held back, every
    count apart (the scheduler's waiting reason, coordinator/core/waiting.py, and this module's
    refusal alike): "needs 6 workers: 6 connected, 4 idle, 0 busy, 1 quarantined, 1 cordoned"."""
    apart = ", ".join(f"{k} {what}" for k, what in ((quarantined, "quarantined"), (cordoned, "cordoned")) if k)
    return f"needs {n} workers: {usable + quarantined + cordoned} connected, {idle} idle, {usable - idle} busy, {apart}{where}"


def shortfall(job: ValidJob, workers: list[pb.WorkerInfo]) -> str:
    """"" when enough connected workers of one backend can run the job, else why not."""
    spec = job.spec
    n, named = spec.world_size, set(spec.placement.worker_ids)
    fit = [w for w in workers if _admits(spec.placement, w) and job.runs_on(w.backend)]
    # A quarantined worker the spec names may run it (it waits for it); others are counted apart.
    usable = [w for w in fit if w.state in CONNECTED or (w.state == pb.QUARANTINED and w.worker_id in named)]
    eligible = Counter(w.backend for w in usable)
    if any(k >= n for k in eligible.values()):
        return ""
    held = [w for w in fit if w.state == pb.QUARANTINED and w.worker_id not in named]
    if held:  # the words of the scheduler's reason (coordinator/core/waiting.py)
        idle = sum(1 for w in usable if w.state == pb.IDLE)
        by_hand = sum(1 for w in held if w.health.cordoned)
        return held_back(n, len(usable), idle, len(held) - by_hand, by_hand, _constraints(spec.placement))
    if len(eligible) > 1:  # enough in all, but a gang never mixes backends
        listed = ", ".join(f"{k} {b}" for b, k in sorted(eligible.items()))
        return f"needs {n} workers of one backend, {listed} connected{_constraints(spec.placement)}"
    return f"needs {n} workers, {sum(eligible.values())} connected{_constraints(spec.placement)}"


def check(job: ValidJob, workers: list[pb.WorkerInfo], queue_hint: str) -> None:
    """Raise InvalidSpec when the connected workers cannot run the job: naming the spec's field
    when none of their backends can run it at all (as the coordinator's admission does: int avg
    on gloo is a reduce_op error, not a shortage), else world_size, with how to queue it anyway."""
    backends = sorted({w.backend for w in workers if w.state in CONNECTED and _admits(job.spec.placement, w)})
    if backends and not any(job.runs_on(b) for b in backends):
        raise job.refusal(backends[0])
    if why := shortfall(job, workers):
        raise InvalidSpec("world_size", f"the connected workers cannot run this job: {why}; {queue_hint}")
