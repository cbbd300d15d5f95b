"""The link matrix: every pair of the gang ping-ponged, in rounds of disjoint pairs at once.

One process group of all n ranks; in round r each rank meets its partner of the round-robin
schedule (ringleader/roundrobin.py): the lower rank initiates, the higher echoes (worker/
workloads/p2p.py's ping-pong, timed and checked the same way). n - 1 rounds (n even) instead of
today's n(n-1) pairs one after another. Each link is then compared with the median of the
comparable links: same host, or across hosts (a host's own links are much faster), each
rank's median first so that one bad host cannot set the median.
"""

from __future__ import annotations

from ringleader import checks, roundrobin
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from worker import faults
from worker.checks import peers
from worker.kinds import Outcome, RunContext

_MIN_LATENCY, _WRONG = 1, 4  # columns of p2p's row: latency, min latency, p50, bandwidth, wrong


def run_link_matrix(job: ValidJob, ctx: RunContext) -> Outcome:
    s, n = job.spec.link_matrix, job.world_size
    hosts = [p.host for p in peers.gather(peers.me(ctx.device))]
    schedule = roundrobin.rounds(n)
    links = [(a, b, r) for r, pairs in enumerate(schedule) for a, b in pairs]
    rounds = [[k for k, link in enumerate(links) if link[2] == r] for r in range(len(schedule))]
    rows = _rows(links, _measure(s, ctx, links, rounds), s.size_bytes)
    result = link_result(rows, hosts, s.size_bytes, len(schedule))
    # A second pass over the flagged links, one at a time (the same list on every rank: every
    # rank holds the same figures): a link that was slow only because its ends waited for a
    # CPU (a busy host) is fast now, while a slow link is slow again. Each keeps its best.
    again = [k for k, x in enumerate(result.links) if x.flagged]
    if not again:
        return Outcome(message=result)
    # Three times the round trips: a rank starved of CPU for a moment gets more chances to run.
    longer = pb.LinkMatrixSpec(size_bytes=s.size_bytes, iters=3 * s.iters, warmup=s.warmup)
    second = _rows(links, _measure(longer, ctx, links, [[k] for k in again]), s.size_bytes)
    for k in again:
        best = max(rows[k], second[k], key=lambda x: x["gbps"])
        rows[k] = {**best, "wrong": rows[k]["wrong"] + second[k]["wrong"]}
    return Outcome(message=link_result(rows, hosts, s.size_bytes, len(schedule)))


def _measure(s: pb.LinkMatrixSpec, ctx: RunContext, links, batches: list[list[int]]) -> list[list[float]]:
    """Ping-pong the links of each batch at the same time, batch after batch; every link's row
    of p2p's figures (all zeros where not measured), the same on every rank."""
    import torch
    import torch.distributed as dist

    # The ping-pong's two ends, shared with the p2p kind (one implementation of the timing).
    from worker.distutil import sync
    from worker.workloads.p2p import _echo, _initiate

    fault = faults.load()
    table = torch.zeros(len(links), 5, dtype=torch.float64)
    for i, batch in enumerate(batches):
        ctx.progress(i, len(batches), s.size_bytes)
        sync(ctx.device)  # a batch starts when every pair of the last one is done
        fault.before_op()
        for k in batch:
            a, b, _ = links[k]
            if ctx.rank == a:
                _initiate("blocking", b, s.size_bytes, s.iters, s.warmup, ctx.device, ctx.counter, table[k])
            elif ctx.rank == b:
                _echo("blocking", a, s.size_bytes, s.iters, s.warmup, ctx.device, ctx.counter, table[k])
    table = table.to(ctx.device)
    dist.all_reduce(table)  # each link's row was written by its two ends only
    return table.cpu().tolist()


def _rows(links, values: list[list[float]], size_bytes: int) -> list[dict]:
    """LinkRow fields from p2p's figures. The fastest round trip counts: what the link can do.
    A rate-limited or failing link is slow on every one; a rank that waited for a CPU, on some."""
    return [dict(a=a, b=b, round=r, latency_us=v[_MIN_LATENCY], wrong=int(v[_WRONG]),
                 gbps=size_bytes / v[_MIN_LATENCY] / 1e3 if v[_MIN_LATENCY] > 0 else 0.0)
            for (a, b, r), v in zip(links, values)]


def link_result(rows: list[dict], hosts: list[str], size_bytes: int, rounds: int) -> pb.LinkMatrixResult:
    """The result from measured links (dicts of LinkRow's first fields) and each rank's host:
    ratios to the median of comparable links, flags, and the symmetric matrix. No communication."""
    n = len(hosts)
    med_same, med_cross = _reference(rows, hosts, same_host=True), _reference(rows, hosts, same_host=False)
    out = pb.LinkMatrixResult(size_bytes=size_bytes, rounds=rounds, median_same_host_gbps=med_same,
                              median_cross_host_gbps=med_cross)
    matrix = [[-1.0] * n for _ in range(n)]
    for r in rows:
        median = med_same if hosts[r["a"]] == hosts[r["b"]] else med_cross
        ratio = r["gbps"] / median if median > 0 else 0.0
        flagged = ratio < checks.LINK_FLAG_RATIO or r["wrong"] > 0
        out.links.append(pb.LinkRow(ratio=ratio, flagged=flagged, **r))
        matrix[r["a"]][r["b"]] = matrix[r["b"]][r["a"]] = r["gbps"]
    out.matrix.extend(pb.P2PMatrixRow(gbps=line) for line in matrix)
    return out


def _reference(rows: list[dict], hosts: list[str], same_host: bool) -> float:
    """The median of comparable links, robust to one bad host: each rank's median link of that
    kind, then the median over ranks. (A plain median over links fails with few hosts: on 3
    hosts a slow one carries 2 of every 3 cross-host links, and would set the median itself.)"""
    per_rank: dict[int, list[float]] = {}
    for r in rows:
        if (hosts[r["a"]] == hosts[r["b"]]) == same_host:
            per_rank.setdefault(r["a"], []).append(r["gbps"])
            per_rank.setdefault(r["b"], []).append(r["gbps"])
    return peers.median([peers.median(v) for v in per_rank.values()])
