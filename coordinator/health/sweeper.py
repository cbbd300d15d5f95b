"""Running the fleet checks: on demand (RunCheck, `ringleader check`) and in the gaps (a sweep).

Checks are ordinary jobs of the check kinds (ringleader/checks.py) submitted through the
coordinator facade's public API at the lowest priority, each naming its workers exactly (so a
quarantined worker can still be checked). One check job runs at a time and each is short: a
user job that arrives during a sweep waits for at most the one check that holds its workers,
never for the sweep. CPU and GPU workers never share a process group, so a check covers each
backend's workers with its own job; a backend of more than GANG_MAX workers with several (`gangs`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Iterable

from coordinator.health import recheck, verdicts
from coordinator.health.fingerprints import gang_key
from ringleader import checks, jobspec, kinds
from ringleader.errors import InvalidSpec, NotFound
from ringleader.spec import format_gib
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

def short(kind: str):
    """What a check asks for when the request leaves its settings unset: the kind table's `short`
    column (ringleader/checks.py short_*)."""
    return kinds.get(kind).resolve("short")()
DEFAULT_WAIT_S = 300.0
MAX_WAIT_S = 3600.0
SUBMIT_TURN = 16  # check jobs submitted in one turn of the event loop
CONNECTED = (pb.IDLE, pb.BUSY, pb.QUARANTINED)


def chosen(workers: Iterable[pb.WorkerInfo], worker_ids: Iterable[str] = (), host: str = "") -> list[pb.WorkerInfo]:
    """The connected workers a request names: exactly `worker_ids`, else those on `host`, else all."""
    live = {w.worker_id: w for w in workers if w.state in CONNECTED}
    ids = list(worker_ids)
    if ids:
        missing = [w for w in ids if w not in live]
        if missing:
            raise NotFound(f"worker {missing[0]} is not connected")
        if len(set(ids)) < len(ids):  # one worker twice would be two ranks of one group
            raise InvalidSpec("worker_ids", f"{next(w for w in ids if ids.count(w) > 1)[:64]!r} is named twice")
        return [live[w] for w in ids]
    return [w for w in live.values() if not host or w.host == host]


# A check job starts only when every worker it names is idle at once. On a fleet with any user
# traffic, one job naming thousands never was: the churn bench's fleet-wide gpu_check stayed
# QUEUED in every run (2,500 workers a job). Gangs of a few hosts each start as their
# own workers free up. 32 is 4 hosts of 8 GPUs: a worker's figures still have dozens of peers of
# its model, and a host's links still cross to other hosts (how link_matrix names a host).
GANG_MAX = 32
MIN_GANG = 3  # the fewest peers a majority can be formed of (sdc_check's checksums)


def gangs(workers: list[pb.WorkerInfo]) -> list[list[str]]:
    """One backend's workers as check gangs: one gang where they are at most GANG_MAX; else, per
    device model (a figure is judged against its model's peers, within the job), whole hosts
    together (a host larger than a gang split), in as few gangs of at most GANG_MAX as fit, of
    about equal size (so that no gang is a lone host where others span several), and a remnant
    of fewer than MIN_GANG joined to the model's last gang."""
    if len(workers) <= GANG_MAX:
        return [[w.worker_id for w in workers]]
    by_model: dict[str, dict[str, list[str]]] = {}
    for w in workers:
        by_model.setdefault(w.device.name, {}).setdefault(w.host, []).append(w.worker_id)
    out: list[list[str]] = []
    for _, hosts in sorted(by_model.items()):
        units = [ids[i:i + GANG_MAX] for ids in hosts.values() for i in range(0, len(ids), GANG_MAX)]
        total = sum(map(len, units))
        size = total / math.ceil(total / GANG_MAX)
        first, gang = len(out), []
        for unit in units:
            if gang and len(gang) + len(unit) > GANG_MAX:
                out.append(gang)
                gang = []
            gang += unit
            if len(gang) >= size:
                out.append(gang)
                gang = []
        if gang and len(gang) < MIN_GANG and len(out) > first:
            out[-1] += gang
        elif gang:
            out.append(gang)
    return out


def plan(workers: list[pb.WorkerInfo], kinds: Iterable[str] = (), settings: pb.RunCheckRequest | None = None,
         ) -> list[pb.JobSpec]:
    """The check jobs for `workers`: per kind and backend, one per gang (`gangs`), each naming its
    workers."""
    kinds = list(kinds) or list(checks.KINDS)
    for k in kinds:
        if k not in checks.KINDS:
            raise InvalidSpec("kinds", f"unknown check {k[:64]!r}; expected any of {', '.join(checks.KINDS)}")
    if len(set(kinds)) < len(kinds):  # each kind once: a request must not become thousands of jobs
        raise InvalidSpec("kinds", f"each check at most once, got {len(kinds)} for {len(set(kinds))} kinds")
    by_lane: dict[tuple[str, str], list[pb.WorkerInfo]] = {}
    for w in sorted(workers, key=lambda w: (w.host, w.device.index, w.worker_id)):
        # A gang never mixes what NCCL needs equal (coordinator/health/fingerprints.py): per lane.
        by_lane.setdefault((w.backend, gang_key(w.fingerprint)), []).append(w)
    split = {lane: gangs(ws) for lane, ws in sorted(by_lane.items())}
    specs = []
    for kind in kinds:
        for (backend, _), each in split.items():
            for n, ids in enumerate(each, 1):
                if kind == "link_matrix" and len(ids) < 2:
                    continue  # a lone worker has no link to measure
                name = f"check {kind}" + (f" {backend} {n}/{len(each)}" if len(each) > 1 else "")
                spec = pb.JobSpec(world_size=len(ids), priority=checks.CHECK_PRIORITY, name=name,
                                  placement=pb.Placement(worker_ids=ids))
                given = settings is not None and settings.HasField(kind)
                getattr(spec, kind).CopyFrom(getattr(settings, kind) if given else short(kind))
                specs.append(spec)
    return specs


async def wait_all(core, job_ids: list[str], timeout_s: float) -> list[pb.Job]:
    """The jobs once each has finished (still queued or running ones as they are at the deadline)."""
    async def finished(job_id: str) -> None:
        async for _ in core.watch(job_id):
            pass

    if not job_ids:  # asyncio.wait refuses an empty set (a recheck round whose due workers were busy)
        return []
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
    workers = chosen(await fleet.all_workers_paced(), request.worker_ids, request.host)
    if not workers:
        raise InvalidSpec("host" if request.host else "worker_ids", "no connected worker to check")
    specs = plan(workers, request.kinds, request)
    # All or none: nothing is submitted if one cannot run. Each gang's own workers, looked up by
    # id: each spec filtering the whole list held the loop 218-296 ms for 5,000 workers' 157
    # gangs (churn, 5,000 workers, on the 4 x H200 host).
    by_id = {w.worker_id: w for w in workers}
    for n, spec in enumerate(specs, 1):
        fits_devices(spec, [by_id[i] for i in spec.placement.worker_ids])
        if n % SUBMIT_TURN == 0:
            await asyncio.sleep(0)
    jobs = []
    for n, spec in enumerate(specs, 1):
        jobs.append(core.submit(spec))
        if n % SUBMIT_TURN == 0:
            await asyncio.sleep(0)  # a fleet's hundreds of gangs: other calls between every few
    await core.durable()
    out = pb.RunCheckResponse(jobs=jobs)
    if request.wait:
        out = pb.RunCheckResponse(jobs=await wait_all(core, [j.id for j in jobs], request.timeout_s or DEFAULT_WAIT_S))
        ids = {w.worker_id for w in workers}
        out.workers.extend(w for w in fleet.all_workers() if w.worker_id in ids)
        recorded = {w.worker_id: w.health for w in out.workers}
        out.named_hosts.extend(sorted({h for j in out.jobs for h in verdicts.named_hosts(j, recorded)}))
        job_ids = {j.id for j in out.jobs}
        out.findings.extend(dict.fromkeys(w.health.finding for w in out.workers
                                          if w.health.finding and w.health.job_id in job_ids))
        for j in out.jobs:
            for worker_id, h in sorted(core.check_verdicts(j.id).items()):
                out.verdicts.add(job_id=j.id, check=j.spec.WhichOneof("kind"), worker_id=worker_id, health=h)
    return out


RECHECK_POLL_S = 15.0


# A CPU's matrix product of n = 2048 takes about a second per iteration; one of 32768 (accepted
# before this bound) held its workers for hours, until cancelled.
CPU_MAX_MATMUL_N = 2048


def fits_devices(spec: pb.JobSpec, workers: list[pb.WorkerInfo]) -> None:
    """Raise InvalidSpec naming the field if a check cannot run on the devices it names: its
    buffers larger than the smallest device's memory, or a matrix too large for a CPU."""
    named = set(spec.placement.worker_ids)
    devices = [w.device for w in workers if w.worker_id in named]
    if spec.HasField("gpu_check") and spec.gpu_check.matmul_n > CPU_MAX_MATMUL_N and \
            any(d.type == "cpu" for d in devices):
        raise InvalidSpec("gpu_check.matmul_n", f"at most {CPU_MAX_MATMUL_N} on CPU workers, got "
                          f"{spec.gpu_check.matmul_n}")
    valid = jobspec.normalize(spec)
    sized = [d for d in devices if d.memory_bytes]
    if sized and valid.needs_bytes > (least := min(sized, key=lambda d: d.memory_bytes)).memory_bytes:
        raise InvalidSpec(jobspec.size_field(valid), f"needs {format_gib(valid.needs_bytes)} per device, "
                          f"{least.name or least.type} has {format_gib(least.memory_bytes)}")


class SweepLedger:
    """When each kind last ran on each worker in a sweep, and what the last sweep skipped. A sweep
    takes its kinds stalest first (the kind whose least recently checked idle worker waited
    longest): a kind skipped because no worker was idle at its turn goes first in the next sweep,
    so light user traffic delays a kind but never starves it (with a fixed order the first kind
    took every gap: 22 minutes beside a user job every 15 s ran 14 link checks, 1 GPU check and
    no corruption check)."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str], float] = {}  # (worker id, kind): monotonic time of its last check
        self.skipped: dict[str, str] = {}  # kind: why the last sweep did not run it
        self.skips: dict[str, int] = {}  # kind: sweeps that skipped it, since start

    def staleness(self, kind: str, worker_ids: Iterable[str], now: float) -> float:
        """Seconds since `kind` last ran on the least recently checked of `worker_ids` (inf: never)."""
        return max((now - self.last.get((w, kind), -math.inf) for w in worker_ids), default=0.0)

    def order(self, kinds: Iterable[str], worker_ids: Iterable[str], now: float) -> list[str]:
        """`kinds`, stalest first on these workers; ties in the given order."""
        ids = list(worker_ids)
        kinds = list(kinds)
        return sorted(kinds, key=lambda k: (-self.staleness(k, ids, now), kinds.index(k)))

    def ran(self, kind: str, worker_ids: Iterable[str], now: float) -> None:
        for w in worker_ids:
            self.last[(w, kind)] = now

    def skip(self, kind: str, why: str) -> None:
        self.skipped[kind] = why
        self.skips[kind] = self.skips.get(kind, 0) + 1

    def plan(self, kinds: Iterable[str], worker_ids: Iterable[str], now: float) -> list[tuple[str, float, str]]:
        """(kind, seconds since it last ran on its stalest worker, why the last sweep skipped it or ''),
        in the order the next sweep takes them (`ringleader check --plan`, the metric)."""
        ids = list(worker_ids)
        return [(k, self.staleness(k, ids, now), self.skipped.get(k, "")) for k in self.order(kinds, ids, now)]


def plan_answer(sweeper: "Sweeper | None", connected: Iterable[str], now: float) -> pb.SweepPlanResponse:
    """SweepPlan's answer (`ringleader check --plan`, GET /api/v1/checks/plan): the kinds in the
    order the next sweep takes them over the `connected` workers, with what the last one skipped."""
    ids = sorted(connected)
    if sweeper is None:  # a core without a sweeper (tests, tools): nothing planned
        return pb.SweepPlanResponse(workers=len(ids))
    ledger = sweeper.ledger
    out = pb.SweepPlanResponse(check_every_s=sweeper.every_s, sweeps=sweeper.sweeps, workers=len(ids))
    for kind, stale, skipped in ledger.plan(sweeper.kinds or checks.KINDS, ids, now):
        never = [w for w in ids if (w, kind) not in ledger.last]
        out.kinds.append(pb.SweepKindPlan(kind=kind, stale_s=-1.0 if math.isinf(stale) else stale, skipped=skipped,
                                          skips=ledger.skips.get(kind, 0), never_checked=len(never),
                                          never_checked_ids=never[:20]))
    return out


class Sweeper:
    """Every `every_s` (0: never) a sweep of the checks over the connected, idle workers, one
    check job at a time, each started only while no user job waits; and, whatever `every_s`, a
    recheck of each failed worker when it is due: only the check it failed, with few peers."""

    def __init__(self, core, fleet, every_s: float = 0.0, kinds: Iterable[str] = (), poll_s: float = 0.2) -> None:
        if every_s < 0:
            raise InvalidSpec("check_every", f"must be 0 (off) or a number of seconds, got {every_s}")
        self.core, self.fleet, self.every_s, self.kinds, self.poll_s = core, fleet, every_s, list(kinds), poll_s
        self.sweeps = 0
        self.ledger = SweepLedger()
        fleet.sweep_ledger = self.ledger  # read by the fleet metrics
        fleet.sweeper = self  # read by SweepPlan (`plan_answer`)
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
            try:
                # A round of rechecks at most every RECHECK_POLL_S: a due worker that is away, or
                # whose check did not finish, keeps its due time and is tried again then.
                if now >= next_recheck and self.fleet.book.due():
                    next_recheck = now + RECHECK_POLL_S
                    await self.recheck()
                if now >= next_sweep:
                    await self.sweep()
                    next_sweep = self._next()
            except Exception:  # a bug here must not end the sweeps for good
                log.exception("fleet sweep failed")

    async def recheck(self) -> list[pb.Job]:
        """Recheck the due workers: each only with the check it failed, and the fewest healthy
        peers (coordinator/health/recheck.py). Rechecks do not wait for a gap between user jobs:
        they are short, name idle workers and start at once, so a queue of user jobs never
        starves them (a falsely quarantined worker a job waits for comes back)."""
        specs = recheck.plan(self.fleet.all_workers(), self.fleet.book.due(), short)
        jobs = [self.core.submit(spec) for spec in specs]
        return await wait_all(self.core, [j.id for j in jobs], DEFAULT_WAIT_S)

    async def sweep(self) -> list[pb.Job]:
        """One sweep: each check job is planned over the workers idle when its turn comes."""
        done = []
        left = list(self.kinds or checks.KINDS)
        self.ledger.skipped = {}
        while left:
            await self._gap()
            idle = [w for w in self.fleet.all_workers() if w.state in (pb.IDLE, pb.QUARANTINED) and not w.job_id]
            kind = self.ledger.order(left, [w.worker_id for w in idle], time.monotonic())[0]
            left.remove(kind)
            specs = plan(idle, [kind])
            if not specs:
                self.ledger.skip(kind, f"{len(idle)} idle worker(s) at its turn")
            for spec in specs:
                await self._gap()
                job = self.core.submit(spec)
                finished = await wait_all(self.core, [job.id], DEFAULT_WAIT_S)
                done += finished
                if finished and finished[0].state == pb.SUCCEEDED:
                    self.ledger.ran(kind, spec.placement.worker_ids, time.monotonic())
                else:
                    self.ledger.skip(kind, f"its job ended {pb.JobState.Name(finished[0].state) if finished else 'unseen'}")
        self.sweeps += 1
        return done

    async def _gap(self) -> None:
        """Wait while a user job is queued: checks use the gaps between user jobs."""
        while any(not checks.is_check(j.spec) for j in self.core.queued_jobs()):
            await asyncio.sleep(self.poll_s)
