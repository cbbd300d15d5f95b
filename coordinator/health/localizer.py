"""The localization driver: runs coordinator/health/planner.py's planner on a live coordinator, through
the facade's public API only (submit, watch, get, list_workers): each round's groups are submitted
as collective jobs pinned to their workers (placement.worker_ids) at the highest priority, all at
once on GPUs (they are disjoint, so they run side by side on warm groups where they exist), one
at a time on CPU workers (see _measure), and their busbw is the figure the planner judges. A group whose job fails counts as slow. Every group is
measured `repeats` times (one round's jobs, then again): a test group's best figure counts (a rank
that waited for a CPU once does not make its group slow), the control group's worst (one lucky
control run does not make clean groups slow).
"""

from __future__ import annotations

import asyncio

from coordinator.health.planner import Group, Planner
from ringleader.errors import FailedPrecondition, InvalidSpec
from ringleader.jobspec import MAX_PRIORITY
from ringleader.v1 import jobs_pb2 as pb

TEST_ITERS = 10  # timed iterations per test (the warm-up is the spec's default)
DEFAULT_TOLERANCE = 0.8
DEFAULT_REPEATS, MAX_REPEATS = 2, 10


def test_shape(job: pb.Job, size_bytes: int = 0) -> pb.CollectiveSpec:
    """The collective each test group runs: the job's op and dtype at one size (its largest)."""
    if job.spec.WhichOneof("kind") != "collective" or not job.workers:
        raise FailedPrecondition(f"job {job.id}: localize needs a collective job that ran on workers")
    if len(job.workers) < 2:
        raise FailedPrecondition(f"job {job.id}: one worker alone has no link to test")
    c = job.spec.collective
    size = size_bytes or max([r.size_bytes for r in job.results] or list(c.sizes) or [c.max_bytes or 1 << 20])
    if size <= 0:
        raise InvalidSpec("size_bytes", "must be > 0 (the job has no sized result)")
    op = c.op if c.op not in ("barrier", "broadcast", "reduce", "gather", "scatter") else "all_reduce"
    return pb.CollectiveSpec(op=op, dtype=c.dtype or "float32", reduce_op=c.reduce_op, sizes=[size], iters=TEST_ITERS)


def idle_known_good(core, job: pb.Job) -> list[str]:
    """Idle workers outside the gang, of the gang's backend, with no bad verdict: test padding."""
    gang = {w.worker_id for w in job.workers}
    out, token = [], ""
    while True:
        page = core.list_workers(states=[pb.IDLE], page_token=token)
        out += [w.worker_id for w in page.workers if w.worker_id not in gang and w.backend == job.backend
                and w.health.verdict not in (pb.SUSPECT, pb.UNHEALTHY)]
        token = page.next_page_token
        if not token:
            return out


def host_map(core) -> dict[str, str]:
    hosts, token = {}, ""
    while True:
        page = core.list_workers(page_token=token)
        hosts.update({w.worker_id: w.host for w in page.workers})
        token = page.next_page_token
        if not token:
            return hosts


async def localize(core, request: pb.LocalizeRequest) -> pb.LocalizeResult:
    """Search a finished collective job's gang for what makes it slow (see the module doc)."""
    job = core.get(request.job_id)
    shape = test_shape(job, request.size_bytes)
    members = [w.worker_id for w in sorted(job.workers, key=lambda w: w.rank)]
    host_of = {**host_map(core), **{w.worker_id: w.host for w in job.workers}}
    known = list(request.known_good) or idle_known_good(core, job)
    unknown = [w for w in known if w not in host_of]
    if unknown:
        raise InvalidSpec("known_good", f"unknown worker(s) {', '.join(unknown[:3])}")
    if request.tolerance and not 0 < request.tolerance < 1:
        raise InvalidSpec("tolerance", f"must be in (0, 1), got {request.tolerance}")
    if request.repeats > MAX_REPEATS:
        raise InvalidSpec("repeats", f"at most {MAX_REPEATS}, got {request.repeats}")
    repeats = request.repeats or DEFAULT_REPEATS
    planner = Planner(members, host_of, known, min_width=max(2, min(4, len(members) // 2)),
                      max_rounds=request.max_rounds, tolerance=request.tolerance or DEFAULT_TOLERANCE)
    out = pb.LocalizeResult(job_id=job.id)
    while (groups := planner.next_round()) is not None:
        seen, ids = await _measure(core, job, planner.rounds, groups, shape, repeats)
        figures = {g: judged(g, fs) for g, fs in seen.items()}
        ref = planner.record(figures)
        out.history.add(round=planner.rounds, reference_gbps=ref, groups=[
            pb.LocalizeGroup(worker_ids=g.members, suspects=g.suspects, job_id=ids[g], busbw_gbps=figures[g],
                             slow=figures[g] < planner.tolerance * ref) for g in groups])
    v = planner.verdict()
    out.culprits.extend(v.culprits)
    out.culprit_hosts.extend(v.hosts)
    out.rounds = v.rounds
    out.unresolved.extend(pb.LocalizeSet(worker_ids=s, why=why) for s, why in zip(v.unresolved, v.why))
    out.verdict = v.describe(host_of)
    return out


async def _measure(core, job: pb.Job, round_: int, groups: list[Group], shape: pb.CollectiveSpec,
                   repeats: int) -> tuple[dict[Group, list[float]], dict[Group, str]]:
    """Every group's figure in each repeat, and its last test job. GPU groups run side by side
    (disjoint devices); CPU (gloo) groups one at a time, in turns that alternate their order:
    side by side, CPU workers that share a machine's cores measure each other's contention (the
    coordinator cannot tell which share one; namespace hosts do), and a clean worker of a clean
    gang was named 1 run in 20 on a 2-core machine."""
    seen: dict[Group, list[float]] = {g: [] for g in groups}
    ids: dict[Group, str] = {}
    for rep in range(repeats):
        if job.backend != "gloo":
            ids.update((g, _submit(core, job.id, round_, g, shape)) for g in groups)
            for g, f in zip(groups, await asyncio.gather(*(_figure(core, ids[g]) for g in groups))):
                seen[g].append(f)
            continue
        for g in (groups if rep % 2 == 0 else groups[::-1]):
            ids[g] = _submit(core, job.id, round_, g, shape)
            seen[g].append(await _figure(core, ids[g]))
    return seen, ids


def judged(g: Group, figures: list[float]) -> float:
    """The figure a group is judged by: a test group's best repeat, the control group's worst.
    A suspect is slow only when even its best run loses to the control's worst: on a shared
    2-core machine clean groups of one round read 0.2 to 1.15 GB/s, and judging best against
    best named a clean worker about 1 run in 16 (its group lost four comparisons in a row)."""
    return max(figures) if g.suspects else min(figures)


def _submit(core, job_id: str, round_: int, g: Group, shape: pb.CollectiveSpec) -> str:
    spec = pb.JobSpec(world_size=len(g.members), priority=MAX_PRIORITY, collective=shape,
                      name=f"localize {job_id} round {round_}"[:256], parent_id=job_id)
    spec.placement.worker_ids.extend(g.members)
    return core.submit(spec).id


async def _figure(core, job_id: str) -> float:
    """The test's busbw once it ends (0 when it failed: a group that cannot finish is slow)."""
    async for _event in core.watch(job_id):
        pass
    done = core.get(job_id)
    if done.state != pb.SUCCEEDED or not done.results:
        return 0.0
    return done.results[-1].busbw_gbps
