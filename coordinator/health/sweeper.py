"""Running the fleet checks: on demand (RunCheck, `ringleader check`) and in the gaps (a sweep).

Checks are ordinary jobs of the check kinds (ringleader/checks.py) submitted through the
coordinator facade's public API at the lowest priority, each naming its workers exactly (so a
quarantined worker can still be checked). One check job runs at a time and each is short: a
user job that arrives during a sweep waits for at most the one check that holds its workers,
never for the sweep. CPU and GPU workers never share a process group, so a check covers each
backend's workers with its own job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Iterable

from coordinator.health import verdicts
from coordinator.health.fleet import RECHECK_MIN_S
from ringleader import checks
from ringleader.errors import FailedPrecondition, InvalidSpec, NotFound
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

# What a check asks for when the request leaves a kind's settings unset: short rounds (the
# link's size chosen by its kind, worker/checks/link_sizes.py: 512 KiB between CPU workers, a
# rate-limited one at 200 Mbit/s takes 21 ms a way, so a whole matrix of 8 hosts stays within
# seconds; 256 MiB over NVLink; 4 round trips, of which the fastest counts, so that a busy
# host's scheduling delays do not).
SHORT = {"link_matrix": pb.LinkMatrixSpec(size_bytes=0, iters=4, warmup=1),
         "gpu_check": pb.GpuCheckSpec(iters=20), "sdc_check": pb.SdcCheckSpec(rounds=2)}
DEFAULT_WAIT_S = 300.0
MAX_WAIT_S = 3600.0
CONNECTED = (pb.IDLE, pb.BUSY, pb.QUARANTINED)


def chosen(workers: Iterable[pb.WorkerInfo], worker_ids: Iterable[str] = (), host: str = "") -> list[pb.WorkerInfo]:
    """The connected workers a request names: exactly `worker_ids`, else those on `host`, else all."""
    live = {w.worker_id: w for w in workers if w.state in CONNECTED}
    ids = list(worker_ids)
    if ids:
        missing = [w for w in ids if w not in live]
        if missing:
            raise NotFound(f"worker {missing[0]} is not connected")
        return [live[w] for w in ids]
    return [w for w in live.values() if not host or w.host == host]


def plan(workers: list[pb.WorkerInfo], kinds: Iterable[str] = (), settings: pb.RunCheckRequest | None = None,
         ) -> list[pb.JobSpec]:
    """The check jobs for `workers`: one per kind and backend, each naming its workers."""
    kinds = list(kinds) or list(checks.KINDS)
    for k in kinds:
        if k not in checks.KINDS:
            raise InvalidSpec("kinds", f"unknown check {k[:64]!r}; expected any of {', '.join(checks.KINDS)}")
    by_backend: dict[str, list[str]] = {}
    for w in sorted(workers, key=lambda w: (w.host, w.device.index, w.worker_id)):
        by_backend.setdefault(w.backend, []).append(w.worker_id)
    specs = []
    for kind in kinds:
        for backend, ids in sorted(by_backend.items()):
            if kind == "link_matrix" and len(ids) < 2:
                continue  # a lone worker has no link to measure
            spec = pb.JobSpec(world_size=len(ids), priority=checks.CHECK_PRIORITY, name=f"check {kind}",
                              placement=pb.Placement(worker_ids=ids))
            given = settings is not None and settings.HasField(kind)
            getattr(spec, kind).CopyFrom(getattr(settings, kind) if given else SHORT[kind])
            specs.append(spec)
    return specs


async def wait_all(core, job_ids: list[str], timeout_s: float) -> list[pb.Job]:
    """The jobs once each has finished (still queued or running ones as they are at the deadline)."""
    async def finished(job_id: str) -> None:
        async for _ in core.watch(job_id):
            pass

    waits = [asyncio.ensure_future(finished(j)) for j in job_ids]
    try:
        await asyncio.wait(waits, timeout=timeout_s)
    finally:
        for w in waits:
            w.cancel()
    return [core.get(j) for j in job_ids]


async def run_check(core, fleet, request: pb.RunCheckRequest) -> pb.RunCheckResponse:
    """Submit the checks a request asks for; with `wait`, answer with their verdicts."""
    if not 0 <= request.timeout_s <= MAX_WAIT_S:
        raise InvalidSpec("timeout_s", f"must be between 0 (the default, {DEFAULT_WAIT_S:.0f} s) and {MAX_WAIT_S:.0f}")
    workers = chosen(fleet.all_workers(), request.worker_ids, request.host)
    if not workers:
        raise InvalidSpec("host" if request.host else "worker_ids", "no connected worker to check")
    jobs = [core.submit(spec) for spec in plan(workers, request.kinds, request)]
    await core.durable()
    out = pb.RunCheckResponse(jobs=jobs)
    if request.wait:
        out = pb.RunCheckResponse(jobs=await wait_all(core, [j.id for j in jobs], request.timeout_s or DEFAULT_WAIT_S))
        out.named_hosts.extend(sorted({h for j in out.jobs for h in verdicts.named_hosts(j)}))
        ids = {w.worker_id for w in workers}
        out.workers.extend(w for w in fleet.all_workers() if w.worker_id in ids)
    return out


PREFLIGHT_KINDS = ("gpu_check", "sdc_check")
PREFLIGHT_WAIT_S = 120.0


def candidates(workers: Iterable[pb.WorkerInfo], spec: pb.JobSpec) -> list[pb.WorkerInfo]:
    """The workers a job could be placed on now: those it names, else the idle ones its
    placement admits (host, GPU model, device type)."""
    p = spec.placement
    if p.worker_ids:  # those connected now (one that is not: the job waits for it, as any other)
        return [w for w in chosen(workers) if w.worker_id in set(p.worker_ids)]
    return [w for w in workers if w.state == pb.IDLE and (not p.host or w.host == p.host)
            and (not p.gpu_model or p.gpu_model in w.device.name)
            and (not p.device_type or w.device.type == p.device_type)]


async def preflight(core, fleet, spec: pb.JobSpec) -> None:
    """Certify a job's possible gang just before it is submitted (JobSpec.preflight): the GPU and
    corruption checks over its candidates; a worker that fails is quarantined, so the scheduler
    places the job on others where the fleet allows, else it waits (needing workers). A failed
    worker the spec names itself cannot be replaced: FailedPrecondition names it and why."""
    if not spec.preflight or checks.is_check(spec):
        return
    workers = candidates(fleet.all_workers(), spec)
    if not workers:
        return  # nothing idle to certify now: the job waits as any other
    request = pb.RunCheckRequest(worker_ids=[w.worker_id for w in workers], kinds=PREFLIGHT_KINDS, wait=True,
                                 timeout_s=PREFLIGHT_WAIT_S)
    answer = await run_check(core, fleet, request)
    named = set(spec.placement.worker_ids)
    failed = [w for w in answer.workers if w.health.verdict == pb.UNHEALTHY and w.worker_id in named]
    if failed:
        h = failed[0].health
        raise FailedPrecondition(f"preflight: worker {failed[0].worker_id} failed {h.check}: {h.figure}; "
                                 f"expected {h.expected}")


class Sweeper:
    """Every `every_s` (0: never) a sweep of the checks over the connected, idle workers, one
    check job at a time, each started only while no user job waits; and a sweep whenever a
    failed worker's recheck is due (whatever `every_s`)."""

    def __init__(self, core, fleet, every_s: float = 0.0, kinds: Iterable[str] = (), poll_s: float = 0.2) -> None:
        if every_s < 0:
            raise InvalidSpec("check_every", f"must be 0 (off) or a number of seconds, got {every_s}")
        self.core, self.fleet, self.every_s, self.kinds, self.poll_s = core, fleet, every_s, list(kinds), poll_s
        self.sweeps = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _next(self) -> float:
        return time.monotonic() + self.every_s if self.every_s else float("inf")

    async def _forever(self) -> None:
        next_sweep, next_recheck = self._next(), 0.0
        while True:
            await asyncio.sleep(self.poll_s)
            now = time.monotonic()
            # A recheck at most once per RECHECK_MIN_S: a due worker that is away, or whose check
            # did not finish, keeps its due time and must not start sweep after sweep.
            recheck = now >= next_recheck and bool(self.fleet.book.due())
            if now < next_sweep and not recheck:
                continue
            try:
                await self.sweep()
            except Exception:  # a bug here must not end the sweeps for good
                log.exception("fleet sweep failed")
            next_sweep, next_recheck = self._next(), time.monotonic() + RECHECK_MIN_S

    async def sweep(self) -> list[pb.Job]:
        """One sweep: each check job is planned over the workers idle when its turn comes."""
        done = []
        for kind in self.kinds or checks.KINDS:
            await self._gap()
            idle = [w for w in self.fleet.all_workers() if w.state in (pb.IDLE, pb.QUARANTINED) and not w.job_id]
            for spec in plan(idle, [kind]):
                await self._gap()
                job = self.core.submit(spec)
                done += await wait_all(self.core, [job.id], DEFAULT_WAIT_S)
        self.sweeps += 1
        return done

    async def _gap(self) -> None:
        """Wait while a user job is queued: checks use the gaps between user jobs."""
        while any(not checks.is_check(j.spec) for j in self.core.queued_jobs()):
            await asyncio.sleep(self.poll_s)
