"""A check's result, assembled by the coordinator from every rank's own evidence. Pure.

Each rank of a check reports on its own stream only what it measured itself (JobDone's
h49e_evidence: its GPU figures and its clock's account of every turn; its checksum and the wrong
elements it received from each sender; its own ends of its links, pass by pass). Here those
become the LinkMatrixResult, GpuCheckResult or SdcCheckResult that verdicts.py judges, by the
same rules the ranks use to decide what to measure again (ringleader/checkmath/). No rank's word
about another is read: what a rank says of a link it is not an end of is dropped, and rank 0's
own assembled outcome is not used at all.

Facts about a worker come from its registration, never from a check's payload: figures are
compared under the device model the worker registered with, and hosts are the registered ones.
A rank that sent no evidence, sent evidence that does not fit the check, or whose executor
claims a device model other than its registration's, is listed in the result's `h49e_gaps`:
suspect (verdicts.py), not healthy, and never failed on that alone. Suspect rather than "not
judged" because a rank that finished its part and reported nothing of it, or something untrue
about itself, has already told us something about itself: an honest worker always reports.
"""

from __future__ import annotations

from collections import Counter

from ringleader import roundrobin
from ringleader.checkmath import flags
from ringleader.checkmath.gpu import ALLOW_CPU_S, ALLOW_S, FLOOR_CPU, gpu_result, resolved
from ringleader.checkmath.links import link_result, passes, rows
from ringleader.checkmath.sdc import sdc_result
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

# What of a rank's free text reaches the result, the verdicts and the UI.
MAX_NAME, MAX_REASON = 64, 256


def evidence_of(done: wpb.JobDone):
    """The rank's own evidence in its JobDone (whichever check's), or None."""
    member = done.WhichOneof("h49e_evidence")
    return getattr(done, member) if member else None


def _own(evidence: dict, kind: type) -> dict:
    """The ranks' evidence of this check's kind (another kind's counts as none)."""
    return {r: e for r, e in evidence.items() if isinstance(e, kind)}


def _gap(rank: int, reason: str) -> pb.H49eEvidenceGap:
    return pb.H49eEvidenceGap(rank=rank, reason=reason)


def _missing(n: int, evidence: dict) -> list[pb.H49eEvidenceGap]:
    return [_gap(r, "no evidence: it finished without reporting its own figures")
            for r in range(n) if r not in evidence]


def _model_claims(models: list[str], evidence: dict) -> list[pb.H49eEvidenceGap]:
    return [_gap(r, f"its executor reported a {ev.device[:MAX_NAME]!r} device, its registration a {models[r]!r}")
            for r, ev in sorted(evidence.items()) if ev.device != models[r]]


def _device_type(ref: pb.WorkerRef) -> str:
    return ref.device.split(":")[0]


def gpu_check(spec: pb.JobSpec, workers: list[pb.WorkerRef], models: list[str], evidence: dict) -> pb.GpuCheckResult:
    """The GPU check's result; `workers` in rank order (registered hosts and device types),
    `models` the device model each registered with, `evidence` {rank: its H49eGpuEvidence}."""
    g, evidence = spec.gpu_check, _own(evidence, wpb.H49eGpuEvidence)
    cuda = all(_device_type(w) == "cuda" for w in workers)
    n, dtype, nbytes = resolved(g, "cuda" if cuda else "cpu")
    allow, floor = (ALLOW_S, flags.FLOOR) if cuda else (ALLOW_CPU_S, FLOOR_CPU)
    gaps = _missing(len(workers), evidence) + _model_claims(models, evidence)
    # How many turns, and series, the ranks took: what most of them say (an honest rank's account
    # covers every turn; one that does not fit is left out).
    turns = _most_common([len(ev.seen_s) for ev in evidence.values()])
    series = _most_common([ev.series for ev in evidence.values()]) or 1
    kept = []
    for r, ev in sorted(evidence.items()):
        if len(ev.seen_s) != turns or ev.turn >= turns or ev.series != series:
            gaps.append(_gap(r, f"its account ({len(ev.seen_s)} turns, its turn {ev.turn}, {ev.series} series) does "
                                f"not fit the check's ({turns} turns, {series} series)"))
        else:
            kept.append(r)
    out = pb.GpuCheckResult(matmul_n=n, dtype=dtype, copy_bytes=nbytes, series=series)
    if kept:
        reports = [(evidence[r].turn, (evidence[r].tflops, evidence[r].copy_gbps, evidence[r].wrong),
                    list(evidence[r].seen_s)) for r in kept]
        out = gpu_result([models[r] for r in kept], reports, n, dtype, nbytes, g.iters, allow, series, floor)
        for w in out.workers:
            w.rank = kept[w.rank]
    out.h49e_gaps.extend(sorted(gaps, key=lambda x: x.rank))
    return out


def _most_common(values: list[int]) -> int:
    counts = Counter(values).most_common()
    return min(v for v, c in counts if c == counts[0][1]) if counts else 0


def sdc_check(spec: pb.JobSpec, workers: list[pb.WorkerRef], models: list[str], evidence: dict) -> pb.SdcCheckResult:
    """The corruption check's result, from every rank's H49eSdcEvidence (as gpu_check)."""
    n, evidence = len(workers), _own(evidence, wpb.H49eSdcEvidence)
    gaps = _missing(n, evidence) + _model_claims(models, evidence)
    kept = []
    for r, ev in sorted(evidence.items()):
        if len(ev.wrong_from) != n:
            gaps.append(_gap(r, f"its wrong_from has {len(ev.wrong_from)} senders, the check {n}"))
        else:
            kept.append(r)
    # Only the ranks that gave evidence judge one another: a sender is named by a majority of them.
    per_rank = [(models[r], evidence[r].checksum[:MAX_NAME], evidence[r].reduce_wrong,
                 [evidence[r].wrong_from[s] for s in kept]) for r in kept]
    out = sdc_result(per_rank) if per_rank else pb.SdcCheckResult()
    for w in out.workers:
        w.rank = kept[w.rank]
        w.wrong_from[:] = list(evidence[w.rank].wrong_from)
    out.h49e_gaps.extend(sorted(gaps, key=lambda x: x.rank))
    return out


def link_matrix(spec: pb.JobSpec, workers: list[pb.WorkerRef], models: list[str],
                evidence: dict) -> pb.LinkMatrixResult:
    """The link matrix's result, from every rank's H49eLinkEvidence, replaying the passes the
    ranks took (ringleader/checkmath/links.py) on each rank's own ends of its links."""
    s, n, evidence = spec.link_matrix, len(workers), _own(evidence, wpb.H49eLinkEvidence)
    hosts = [w.host for w in workers]
    schedule = roundrobin.rounds(n)
    links = [(a, b, r) for r, pairs in enumerate(schedule) for a, b in pairs]
    gaps = _missing(n, evidence)
    recorded = [_pass_reports(links, evidence, i)
                for i in range(max((len(e.passes) for e in evidence.values()), default=0))]
    if not recorded:
        return pb.LinkMatrixResult(rounds=len(schedule), h49e_gaps=gaps)
    reason = Counter(e.size_reason[:MAX_REASON] for e in evidence.values()).most_common(1)[0][0]
    size = max((x for x in recorded[0][0] if x), default=0)
    taken = iter(recorded)

    def measure(spec_: pb.LinkMatrixSpec, batches: list[list[int]], box_s: float = 0.0,
                check: bool = True) -> list[dict]:
        # The passes the ranks took, in order (they took the same decisions on the same figures);
        # past the last one recorded, the last again, which changes no link's best.
        sizes, reports = next(taken, recorded[-1])
        return rows(links, sizes, reports)

    def judge(measured: list[dict], reference=None, slow=None) -> pb.LinkMatrixResult:
        return link_result(measured, hosts, size, len(schedule), reason, reference, slow)

    out = passes(s, links, hosts, len(schedule), measure, judge)
    out.h49e_gaps.extend(gaps)
    return out


def _pass_reports(links: list[tuple[int, int, int]], evidence: dict, i: int) -> tuple[list[int], list[dict]]:
    """(size per link, every rank's report {link: (fastest us, total us, wrong)}) of pass `i`, from
    each rank's own ends only. A link whose ends report different sizes, or only one of whose
    ends reported, has no figure (its ends disagree: verdicts.py suspects the reporters, never
    the link); its wrong bytes still count."""
    n = 1 + max((max(a, b) for a, b, _ in links), default=0)
    ends: dict[int, dict[int, wpb.H49eLinkEnd]] = {}
    for r, ev in evidence.items():
        if i < len(ev.passes):
            for e in ev.passes[i].ends:
                if e.link < len(links) and r in links[e.link][:2]:  # its own links only
                    ends.setdefault(e.link, {})[r] = e
    sizes = [0] * len(links)
    reports: list[dict] = [{} for _ in range(n)]
    for k, by_rank in ends.items():
        both = len(by_rank) == 2 and len({e.size_bytes for e in by_rank.values()}) == 1
        sizes[k] = max(e.size_bytes for e in by_rank.values())
        for r, e in by_rank.items():
            reports[r][k] = (e.fastest_us, e.total_us, e.wrong, e.round_trips) if both else (0.0, 0.0, e.wrong, 0)
    return sizes, reports
