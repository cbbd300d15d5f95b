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
