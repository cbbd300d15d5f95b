"""Verdicts from a finished check: which worker is healthy, suspect or failed, and why. Pure.

The coordinator assembles a check's result from every rank's own evidence (assemble.py), flagging
each figure against the median of comparable peers (ringleader/checkmath/); here those flags
become verdicts on workers, with their evidence (figure and expectation). A rank the assembly
could not judge on its own evidence (none, or claims its registration contradicts) is suspect.

- link_matrix: a worker whose peers dispute most of its links' figures is suspect. A worker most of whose links are flagged is failed, and so is every worker of a
  host most of whose cross-host links are flagged (a slow NIC or cable shows on every link of
  the host, while each of its peers has only one slow link: theirs to it). A link that corrupted
  bytes, and that no failed worker explains, makes both its ends suspect; a link that is only
  slow stays flagged in the result but names nobody. The others are healthy.
- gpu_check: a flagged worker (below its same-model peers' noise-aware bound, or a product unlike
  the first) is failed; a worker whose figures its turn cannot explain (peers' clocks) is suspect;
  so is one refused on a turn longer than the job ran by the coordinator's clock (a forged account).
- sdc_check: a checksum other than the majority of its model's is failed, and so is the sender of
  wrong data in the exact collectives that a strict majority of its receivers name (a receiver
  of wrong data is not the culprit). With no checksum majority, the disagreeing workers are
  suspect; a worker named by a minority, or that saw wrong data no failed sender explains, is
  suspect (one accuser's word quarantines nobody).

Then, with an `Expect`, every figure is judged against what that hardware should do as well
(coordinator/health/expectations.py): the expectation wins where the peers, all alike, cannot see
a slowdown, and a fleet or a host below it alike is one finding.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from coordinator.health import expectations
from ringleader import checks, kinds
from ringleader.v1 import jobs_pb2 as pb

HEALTHY, SUSPECT, FAILED = pb.HEALTHY, pb.SUSPECT, pb.UNHEALTHY


def of_job(job: pb.Job, expect: Expect | None = None) -> dict[str, pb.WorkerHealth]:
    """{worker id: verdict} for every worker of a SUCCEEDED check job ({} for other jobs). With
    `expect` (the registered models and the history), each figure is judged against its
    expectation too (coordinator/health/expectations.py), which then learns the passing figures."""
    kind = job.spec.WhichOneof("kind")
    if job.state != pb.SUCCEEDED or kind not in checks.KINDS or not job.HasField(kind):
        return {}
    ranks = {w.rank: w for w in job.workers}
    found = kinds.get(kind).resolve("verdicts")(getattr(job, kind), ranks)  # the kind table's column
    if kind == "gpu_check":
        found.update(_beyond_the_clock(job))
    _no_evidence(getattr(job, kind), found)
    finding_of: dict[int, str] = {}
    if expect is not None:
        judged = expectations.judge(job, found, expect.models, expect.history)
        found, finding_of = judged.found, judged.finding_of
        expect.findings.extend(judged.findings)
        expectations.learn(job, {r: v for r, (v, _, _) in found.items()}, expect.models, expect.history)
    at = job.finished_at
    return {ranks[r].worker_id: pb.WorkerHealth(verdict=v, check=kind, figure=fig, expected=exp, at=at, job_id=job.id,
                                                finding=finding_of.get(r, ""))
            for r, (v, fig, exp) in found.items() if r in ranks}


def _no_evidence(result, found: Found) -> None:
    """A rank the assembly could not judge on its own evidence (assemble.py's gaps): suspect,
    unless its own figures failed it."""
    for gap in result.h49e_gaps:
        if found.get(gap.rank, (HEALTHY,))[0] != FAILED:
            found[gap.rank] = (SUSPECT, gap.reason, "its own evidence, consistent with its registration "
                               "(each rank speaks for itself: coordinator/health/assemble.py)")


@dataclass
class Expect:
    """What judging against expectations needs: worker id -> registered device model, the history;
    `findings` collects the (scope, text) findings raised."""

    models: Mapping[str, str]
    history: expectations.History
    findings: list[tuple[str, str]] = field(default_factory=list)


def named_hosts(job: pb.Job, recorded: Mapping[str, pb.WorkerHealth] | None = None) -> list[str]:
    """Hosts every one of whose workers a check failed (what `ringleader check` names). `recorded`:
    the workers' health as the coordinator recorded it (a verdict of this job counts); without it
    the peers' verdicts are computed again."""
    if recorded is None:
        verdicts = of_job(job)
    else:
        verdicts = {w: h for w, h in recorded.items() if h.job_id == job.id}
    by_host: dict[str, list[int]] = defaultdict(list)
    for w in job.workers:
        by_host[w.host].append(verdicts.get(w.worker_id, pb.WorkerHealth()).verdict)
    return sorted(h for h, vs in by_host.items() if vs and all(v == FAILED for v in vs))


Found = dict[int, tuple[int, str, str]]  # rank -> (verdict, figure, expected)


def _links(r: pb.LinkMatrixResult, ranks: dict[int, pb.WorkerRef]) -> Found:
    host = {k: w.host for k, w in ranks.items()}
    mine: dict[int, list[pb.LinkRow]] = defaultdict(list)
    for link in r.links:
        mine[link.a].append(link)
        mine[link.b].append(link)
    out: Found = {}
    for rank, links in mine.items():
        if _most_flagged(links):
            out[rank] = (FAILED, *_link_evidence(r, links, "links"))
    for h in set(host.values()):
        cross = [x for x in r.links if (host.get(x.a) == h) != (host.get(x.b) == h)]
        if _most_flagged(cross):
            for rank in (k for k, v in host.items() if v == h):
                out.setdefault(rank, (FAILED, *_link_evidence(r, cross, f"cross-host links of host {h}")))
    for x in r.links:  # a slow link alone names nobody (one slow figure may be noise); bad bytes do
        if x.wrong and x.a not in out and x.b not in out:
            for rank in (x.a, x.b):
                out.setdefault(rank, (SUSPECT, *_link_evidence(r, [x], f"link {x.a}-{x.b}")))
    for rank, (disputed, links) in _disputed_reporters(mine).items():  # the reporter, not the link
        out.setdefault(rank, (SUSPECT, f"its figures disagree with the other end's on {disputed} of "
                              f"{links} links", "both ends of a link time the same round trips "
                              "(within 2x); a rank whose peers dispute most of its links reports untrue figures"))
    for rank in mine:
        out.setdefault(rank, (HEALTHY, *_link_evidence(r, mine[rank], "links")))
    return out


def _disputed_reporters(mine: dict[int, list[pb.LinkRow]]) -> dict[int, tuple[int, int]]:
    """Ranks whose peers dispute most of their links, most disputed first: (disputed, links). A
    rank found so is taken out before the next is judged, so the links a liar disputes are no
    evidence against its honest peers (each of them shares one link with it, and one noisy link
    more would otherwise make it look like a liar too)."""
    found: dict[int, tuple[int, int]] = {}
    while True:
        counts, claimed_more = {}, {}
        for rank, links in mine.items():
            if rank in found:
                continue
            kept = [x for x in links if (x.b if x.a == rank else x.a) not in found]
            disputed = sum(x.ends_disagree for x in kept)
            if len(kept) >= 2 and 2 * disputed > len(kept):
                counts[rank] = (disputed, len(kept))
                claimed_more[rank] = sum(x.ends_disagree and _claims_more(x, rank) for x in kept)
        if not counts:
            return found
        # Equally disputed ranks (a liar's 2 of 3 links, and an honest peer's link with it plus one
        # more that scheduling noise split): the one that claimed the faster figure in more of its
        # disputes. Inflating claims faster; noise makes the delayed end read slower. (The lowest
        # rank was taken before: an honest rank 0 was named in a loaded run, the liar cleared.)
        rank = max(counts, key=lambda k: (counts[k][0] / counts[k][1], claimed_more[k], -k))
        found[rank] = counts[rank]


def _claims_more(link: pb.LinkRow, rank: int) -> bool:
    """Whether `rank`'s end of the link reported the faster figure."""
    mine, other = (link.gbps_a, link.gbps_b) if link.a == rank else (link.gbps_b, link.gbps_a)
    return mine > other


def _most_flagged(links: list[pb.LinkRow]) -> bool:
    # At least two links: with one, its two ends are equally to blame.
    return len(links) >= 2 and 2 * sum(x.flagged for x in links) > len(links)


def _link_evidence(r: pb.LinkMatrixResult, links: list[pb.LinkRow], what: str) -> tuple[str, str]:
    flagged = [x for x in links if x.flagged]
    worst = min(links, key=lambda x: x.ratio)
    figure = (f"{len(flagged)} of {len(links)} {what} flagged; slowest {worst.gbps:.3g} GB/s "
              f"({worst.ratio:.2f} of its median)" + (f", {sum(x.wrong for x in links)} bytes wrong"
                                                       if any(x.wrong for x in links) else ""))
    expected = (f"each link above the noise-aware bound of comparable links (same host: median "
                f"{r.median_same_host_gbps:.3g} GB/s, bound {r.flag_same_host_gbps:.3g}; across hosts: median "
                f"{r.median_cross_host_gbps:.3g} GB/s, bound {r.flag_cross_host_gbps:.3g}; median - max(4 sigma, "
                f"0.3 x median), sigma 1.4826 MAD or less (flags.py)) at {r.size_bytes} bytes ({r.size_reason or 'given'}), no byte wrong")
    return figure, expected


def _gpus(r: pb.GpuCheckResult, ranks: dict[int, pb.WorkerRef]) -> Found:
    out: Found = {}
    for w in r.workers:
        peers = sum(1 for x in r.workers if x.device == w.device)
        med_t = w.tflops / w.tflops_ratio if w.tflops_ratio else 0.0
        med_c = w.copy_gbps / w.copy_ratio if w.copy_ratio else 0.0
        figure = f"{w.tflops:.4g} TFLOP/s ({r.dtype} n={r.matmul_n}), copy {w.copy_gbps:.4g} GB/s (read+write)"
        if w.wrong:
            figure += f", {w.wrong} loops with a product unlike the first"
        if w.refused:
            figure += (f"; its figures claimed {w.claimed_s:.3g} s of loops, its turn took {w.witnessed_s:.3g} s "
                       "by its peers' clocks (refused)")
        expected = (f"the median of {peers} {w.device} peers: {med_t:.4g} TFLOP/s, copy {med_c:.4g} GB/s; "
                    f"flagged below {w.flag_tflops:.4g} TFLOP/s or {w.flag_copy_gbps:.4g} GB/s (median - max(4 sigma, "
                    "0.3 x median on GPUs, 0.4 on CPUs), sigma 1.4826 MAD or less (flags.py)); products equal bit for bit; "
                    "figures its turn can explain")
        out[w.rank] = (FAILED if w.flagged else SUSPECT if w.refused else HEALTHY, figure, expected)
    return out


CLOCK_ALLOW_S = 1.0  # the workers' and the coordinator's clocks, and the result's trip to it


def _beyond_the_clock(job: pb.Job) -> Found:
    """The coordinator's own clock bounds what the ranks said of each other: no turn can have
    lasted longer than the whole job ran (dispatched to finished, by this clock). A refusal that
    rests on such a turn rests on a forged account (with two ranks, one liar is half the median);
    that rank is not judged on it: suspect, never failed."""
    ran = job.finished_at - job.started_at
    out: Found = {}
    for w in job.gpu_check.workers:
        if w.refused and job.started_at and w.witnessed_s > ran + CLOCK_ALLOW_S:
            out[w.rank] = (SUSPECT, f"refused on a turn of {w.witnessed_s:.3g} s by its peers' account, but the "
                           f"whole job ran {ran:.3g} s by the coordinator's clock: an account is forged",
                           "turn accounts the coordinator's clock allows")
    return out


def _sdc(r: pb.SdcCheckResult, ranks: dict[int, pb.WorkerRef]) -> Found:
    out: Found = {}
    n = len(r.workers)
    failed = {w.rank for w in r.workers if n >= 3 and 2 * w.named_by > n - 1}  # senders a majority named
    for w in r.workers:
        same = [x.checksum for x in r.workers if x.device == w.device]
        majority = max(set(same), key=same.count)
        no_majority = 2 * same.count(majority) <= len(same)
        figure = f"checksum {w.checksum[:16]}, {w.collective_wrong} elements wrong in exact collectives"
        if w.named_by:
            figure += f"; named as the sender of wrong data by {w.named_by} of {len(r.workers) - 1} receivers"
        if w.flagged:
            verdict = FAILED
        elif _accuses_every_sender(w, failed, n):
            verdict = FAILED
            figure += (f"; received wrong data from all {n - 1} senders, each of whom every other receiver got "
                       "right: its own receive path corrupts, or its report lies")
        elif (no_majority and len(set(same)) > 1) or _tied(w, len(r.workers)) or _unexplained(w, failed):
            verdict = SUSPECT
        else:
            verdict = HEALTHY
        expected = (f"the majority checksum of {len(same)} {w.device} peers ("
                    + ("none: no majority" if no_majority else majority[:16]) + "), 0 elements wrong; "
                    "blame for wrong data goes to the sender a majority of receivers name")
        out[w.rank] = (verdict, figure, expected)
    return out


def _tied(w: pb.SdcFigures, n: int) -> bool:
    """Named by exactly half of its receivers (with two ranks, by the only one): the accused and
    the accusers cannot be told apart, so all are suspect. Named by fewer, the majority vouches."""
    return bool(w.named_by) and 2 * w.named_by >= n - 1


def _accuses_every_sender(w: pb.SdcFigures, failed: set[int], n: int) -> bool:
    """This rank's own report says every other rank sent it wrong data, and no sender was named by a
    majority: each of them reached every other receiver intact (their own reports). The fault is
    then on this rank's side, whichever way: its receive path corrupts, or it lies about it. The
    verdict rests on its own word and on each other rank's word about itself, never on what it says
    of another. Three ranks at least, so each sender has another receiver to clear it."""
    if n < 3:
        return False
    accused = {s for s, k in enumerate(w.wrong_from) if k and s != w.rank}
    return len(accused) == n - 1 and not (accused & failed)


def _unexplained(w: pb.SdcFigures, failed: set[int]) -> bool:
    """Wrong data this rank received that no sender its receivers' majority named explains: it
    accuses alone (its own receive path, or a lie), so it is suspect; the accused is not blamed
    on its word."""
    accused = {s for s, k in enumerate(w.wrong_from) if k}
    if accused - failed:
        return True
    # A wrong sum with no failed sender; or a result from before per-sender counts.
    return bool(w.reduce_wrong and not failed) or (w.collective_wrong and not w.wrong_from and not failed)
