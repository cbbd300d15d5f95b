"""The link matrix: every pair of the gang ping-ponged, in rounds of disjoint pairs at once.

One process group of all n ranks; in round r each rank meets its partner of the round-robin
schedule (ringleader/roundrobin.py): the lower rank initiates, the higher echoes (worker/
workloads/p2p.py's ping-pong, checked the same way). n - 1 rounds (n even).

Evidence no rank can forge for another: both ends time every round trip (the initiator from
send to return, the echo between successive returns; pingpong.py) and each rank reports only
the links it is an end of (its own stream: H49eLinkEvidence); what a rank says of other links is
never read. A link's figure is the slower of its two ends' fastest round trips (an end cannot
make its link look faster than the other end saw it); when the two ends' totals for the same round trips disagree beyond noise
(DISAGREE), the link is not judged on it and the reporters are suspect (verdicts.py: a rank
most of whose links its peers dispute).

The size is chosen by link kind (link_sizes.py) unless the spec gives one, so that each link is
saturated. Each link is compared with the median of comparable links (same host, or across
hosts; each rank's median first, so that one bad host cannot set it), flagged below a
noise-aware bound (ringleader/checkmath/: where the ranks' figures are judged).
"""

from __future__ import annotations

from ringleader import roundrobin
from ringleader.checkmath.links import link_result, passes, rows
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker import faults
from worker.checks import link_sizes, peers
from worker.kinds import Outcome, RunContext

# Seconds of round trips a link makes at most in one pass (pingpong.py's box; a few round trips
# more past it). A clean CPU link of the namespace bed does its 20 round trips in tens of
# milliseconds, a 200 Mbit/s one takes 42 ms for each, a 50 Mbit/s one 168 ms: without a box each
# pass over a slow host's rounds took seconds per round (30-61 s a check at 200 Mbit/s against
# 3.6 s clean). A link cut short reports the round trips it made (LinkRow.round_trips) and the
# fastest of them; a slow link is as slow on few as on many.
BOX_S = 0.25


def run_link_matrix(job: ValidJob, ctx: RunContext) -> Outcome:
    s, n = job.spec.link_matrix, job.world_size
    everyone = peers.gather(peers.me(ctx.device))
    hosts = [p.host for p in everyone]
    schedule = roundrobin.rounds(n)
    links = [(a, b, r) for r, pairs in enumerate(schedule) for a, b in pairs]
    sizes, reason = link_sizes.choose(s.size_bytes, everyone, links)
    evidence = wpb.H49eLinkEvidence(size_reason=reason)

    def measure(spec: pb.LinkMatrixSpec, batches: list[list[int]], box_s: float = BOX_S,
                check: bool = True) -> list[dict]:
        reports = _measure(spec, sizes, ctx, links, batches, box_s, check)
        evidence.passes.append(own_pass(spec.iters, batches, links, sizes, reports[ctx.rank]))
        return rows(links, sizes, reports)

    def judge(measured: list[dict], reference: tuple[float, float, float, float] | None = None,
              slow: set[int] | None = None) -> pb.LinkMatrixResult:
        return link_result(measured, hosts, max(sizes), len(schedule), reason, reference, slow)

    return Outcome(message=passes(s, links, hosts, len(schedule), measure, judge), evidence=evidence)


def own_pass(iters: int, batches: list[list[int]], links, sizes: list[int], mine: dict) -> wpb.H49eLinkPass:
    """What this rank reports of one pass: its own ends of the links it measured (a rank's report
    of another's link, the rogue's, is left to the coordinator to ignore)."""
    return wpb.H49eLinkPass(iters=iters, batches=[links[b[0]][2] for b in batches if b], ends=[
        wpb.H49eLinkEnd(link=k, size_bytes=sizes[k], fastest_us=us, total_us=total, wrong=int(wrong), round_trips=n)
        for k, (us, total, wrong, n) in sorted(mine.items())])


def _measure(s: pb.LinkMatrixSpec, sizes: list[int], ctx: RunContext, links,
             batches: list[list[int]], box_s: float = BOX_S, check: bool = True) -> list[dict]:
    """Ping-pong the links of each batch at the same time, batch after batch (their bytes checked
    unless `check` is False). Every rank's own
    report ({link: (fastest one-way us, total us, bytes wrong, timed round trips)} for the links it is an end of), in rank order."""
    from worker.checks.pingpong import echo, initiate
    from worker.distutil import sync

    fault = faults.load()
    mine: dict[int, tuple[float, float, int, int]] = {}
    for i, batch in enumerate(batches):
        ctx.progress(i, len(batches), max(sizes[k] for k in batch))
        sync(ctx.device)  # a batch starts when every pair of the last one is done
        fault.before_op()
        for k in batch:
            a, b, _ = links[k]
            if ctx.rank == a:
                mine[k] = initiate(b, sizes[k], s.iters, s.warmup, ctx.device, ctx.counter, box_s, check)
            elif ctx.rank == b:
                mine[k] = echo(a, sizes[k], ctx.device, ctx.counter)
    mine = {k: (us / fault.inflate_figures, total / fault.inflate_figures, wrong, n)
            for k, (us, total, wrong, n) in mine.items()}
    if fault.write_peer_row:  # the rogue: a slower figure for every link of the others
        mine.update({k: (fault.write_peer_row, fault.write_peer_row * s.iters, 0, s.iters)
                     for k in range(len(links)) if ctx.rank not in links[k][:2]})
    return peers.gather(mine)

