"""What a recheck runs (pure): only the check a worker failed, on that worker and the fewest
healthy peers the check needs to judge it, never a sweep of every kind over the whole fleet (one
false verdict must not seed the next), and never beside another due worker.

The peers: idle workers of the same backend and GPU model whose verdict is HEALTHY and that are
not quarantined, PEERS of them (the GPU and corruption checks compare a worker with the median or
the majority of its same-model peers: with two peers a slow or wrong one stands out; a link check
needs two links per worker to blame one). Each due worker gets its own check job, with peers no
other recheck of the round uses. A worker whose verdict came from a cordon has no check to repeat; one with too few
healthy peers idle now (AT_LEAST) waits for the next round.
"""

from __future__ import annotations

import statistics
from typing import Callable, Iterable

from coordinator.health.fingerprints import gang_key
from ringleader import checks
from ringleader.v1 import jobs_pb2 as pb

PEERS = 2
# The fewest peers a kind can judge a worker with: a corruption check needs a majority of
# agreeing checksums (a worker and one peer that disagree make both suspect); a lone worker's
# GPU check compares it with itself and its link check has no link.
AT_LEAST = {"sdc_check": 2}
# Evidence that is no check kind, and the check that judges it again: a repeat offender's crashes
# (coordinator/health/crashes.py) came from collectives with its peers, which the corruption
# check's exact collectives exercise.
RECHECK_WITH = {"crash": "sdc_check"}


def plan(workers: Iterable[pb.WorkerInfo], due: Iterable[str], short: Callable) -> list[pb.JobSpec]:
    """Check jobs for the due workers (ids, oldest first) among `workers` (the listing); `short(kind)`:
    the settings a check runs with."""
    listed = {w.worker_id: w for w in workers}
    idle = (pb.IDLE, pb.QUARANTINED)
    specs = []
    taken: set[str] = set()
    for worker_id in due:
        w = listed.get(worker_id)
        kind = RECHECK_WITH.get(w.health.check, w.health.check) if w is not None else ""
        if w is None or w.state not in idle or kind not in checks.KINDS or worker_id in taken:
            continue  # away, busy, cordoned by hand (no check to repeat), or a peer already
        # Its own job: with other suspects in it, the median it is judged by may be a suspect's.
        peers = [p.worker_id for p in listed.values()
                 if p.state == pb.IDLE and p.backend == w.backend and p.device.name == w.device.name
                 and gang_key(p.fingerprint) == gang_key(w.fingerprint)  # a gang never mixes them
                 and p.health.verdict == pb.HEALTHY and p.worker_id not in taken][:PEERS]
        if len(peers) < AT_LEAST.get(kind, 1):
            continue  # too few healthy peers idle now: the next round tries again
        members = sorted([worker_id, *peers], key=lambda wid: (listed[wid].host, listed[wid].device.index, wid))
        taken.update(members)
        spec = pb.JobSpec(world_size=len(members), priority=checks.CHECK_PRIORITY, name=f"recheck {kind}",
                          placement=pb.Placement(worker_ids=members))
        getattr(spec, kind).CopyFrom(short(kind))
        specs.append(spec)
    return specs


# A condemned worker's link is as good as its peers' when it reads at least this share of the
# median of the links that do not touch it: the bound a link is condemned by never asks more
# (worker/checks/flags.py: the median less at least its FLOOR, 0.3, of it).
RELEASE_SHARE = 0.7


def hold_unfounded_releases(job: pb.Job, found: dict[str, pb.WorkerHealth],
                            standing: Callable[[str], pb.WorkerHealth]) -> dict[str, pb.WorkerHealth]:
    """`found` (verdicts.of_job's) with every release of a worker failed by a link check that the
    check cannot support turned back into a failure of the same check: released only by evidence as
    strong as what condemned it. A link check releases a worker only when more than half of its
    links read at least RELEASE_SHARE of the median of the links of that kind that do not touch it
    and whose two ends agree (_unfounded); with no such link (a 3-worker recheck whose one peer
    link was dropped for ends_disagree) the suspect's own links would set the median and it could
    pass itself.
    `standing(worker_id)`: the book's current verdict."""
    if job.spec.WhichOneof("kind") != "link_matrix" or not job.HasField("link_matrix"):
        return found
    rank_of = {w.worker_id: w.rank for w in job.workers}
    host_of = {w.rank: w.host for w in job.workers}
    out = dict(found)
    for worker_id, new in found.items():
        old = standing(worker_id)
        if new.verdict != pb.HEALTHY or old.verdict != pb.UNHEALTHY or old.check != "link_matrix":
            continue
        why = _unfounded(job.link_matrix, rank_of.get(worker_id), host_of)
        if why:
            held = pb.WorkerHealth()
            held.CopyFrom(new)
            held.verdict = pb.UNHEALTHY
            held.figure = f"not released: {why}"[:200]
            held.expected = old.expected or old.figure
            out[worker_id] = held
    return out


def _unfounded(r: pb.LinkMatrixResult, rank: int | None, host_of: dict[int, str]) -> str:
    """Why this result cannot release `rank` ('' when it can): held while at least half of its links
    read below RELEASE_SHARE of the median of comparable links without it. The mirror of what
    condemned it (most of its links flagged), with a band between the two where it stays as it is:
    a constant fault keeps one verdict, and one link of seven that noise on a busy host slowed does
    not keep a recovered host out (a 2-link recheck still needs both)."""
    if rank is None:
        return "the worker is not in the check"
    own = [x for x in r.links if rank in (x.a, x.b)]
    if not own:
        return "the check measured none of its links"
    below = []  # (share of the median, link, median)
    for x in own:
        same = host_of.get(x.a) == host_of.get(x.b)
        ref = [y.gbps for y in r.links if rank not in (y.a, y.b) and not y.ends_disagree and y.gbps > 0
               and (host_of.get(y.a) == host_of.get(y.b)) == same]
        if not ref:
            kind = "same-host" if same else "cross-host"
            return f"no {kind} link without it whose two ends agree, to judge its links against"
        median = statistics.median(ref)
        if x.gbps < RELEASE_SHARE * median:
            below.append((x.gbps / median, x, median))
    if 2 * len(below) < len(own):
        return ""
    share, x, median = min(below, key=lambda b: b[0])
    return (f"{len(below)} of {len(own)} links below {RELEASE_SHARE:.2f} of the median without it (fewer than half "
            f"to release); slowest {x.a}-{x.b} at {x.gbps:.4g} GB/s, {share:.2f} of the median {median:.4g}")
