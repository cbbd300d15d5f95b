"""The GPU check's judging, pure: each rank's figures checked against the turns every rank's
clock saw, then against its same-model peers under the noise-aware bound (flags.py). The runner
(worker/checks/gpu_check.py) measures; what follows from the figures is here, so that the
coordinator judges from each rank's own evidence and the runner decides what to measure again.

Evidence no rank can forge: every rank's clock times every turn (barrier to barrier), and a
rank's figures claim how long its loops took at least; a claim far below the turn its peers saw
(more than SLACK times the pace of the other turns against their claims, plus ALLOW) is refused.
A refused rank alone in its turn is judged on the figures its turn implies (what its peers saw),
else its figures are left out (verdicts: suspect).
"""

from __future__ import annotations

from ringleader import checks
from ringleader.checkmath import flags
from ringleader.checkmath.flags import median
from ringleader.v1 import jobs_pb2 as pb

ROUNDS = 3  # loops of each kind per rank in a series (the best counts)
# A turn may take this much longer than its claims (barriers, its slower loops, noise). On a CPU
# worker a busy machine deschedules a rank for a good part of a second (seen at load 33, 8 ranks
# on 2 cores: a clean rank refused with 0.05 s); an 8x slower rank still exceeds it.
SLACK, ALLOW_S, ALLOW_CPU_S = 4.0, 0.05, 0.5
# A CPU worker's figures carry its host's noise, which a GPU's do not: its core's caches and the
# memory bus are shared with every other process there. Under a test suite's load (a 2-core VM,
# memory-heavy neighbours) a clean rank's best copy read 0.68-0.81 of its peers' median, against
# the usual floor's 0.7. A device at half its peers' speed is below 0.6 when they agree; where
# they spread, the band widens past it under either floor (a halved copy on that VM read up to
# 0.735, named 4 times in 20: docs/decisions/gpu-check-cpu-floor.md).
FLOOR_CPU = 0.4


def resolved(spec: pb.GpuCheckSpec, device_type: str) -> tuple[int, str, int]:
    """(matmul_n, dtype, copy_bytes), the device's defaults where the spec leaves them unset."""
    d = checks.GPU_DEFAULTS["cuda" if device_type == "cuda" else "cpu"]
    return spec.matmul_n or d["matmul_n"], spec.dtype or d["dtype"], spec.copy_bytes or d["copy_bytes"]


def claimed_s(tflops: float, gbps: float, n: int, nbytes: int, iters: int, series: int = 1) -> float:
    """The least time a rank's timed loops took, if its figures are true (ROUNDS loops of each
    in each series)."""
    if tflops <= 0 or gbps <= 0:
        return 0.0
    return series * ROUNDS * iters * (2 * n ** 3 / (tflops * 1e12) + 2 * nbytes / (gbps * 1e9))


def gpu_result(models: list[str], reports: list[tuple], n: int, dtype: str, nbytes: int,
               iters: int, allow_s: float = ALLOW_S, series: int = 1, floor: float = flags.FLOOR) -> pb.GpuCheckResult:
    """Each rank's figures (its reports: (turn, (tflops, copy GB/s, wrong), turn seconds seen))
    checked against the turns every rank's clock saw, then against its same-model peers under
    the noise-aware bound. No communication."""
    turn_of = [t for t, _, _ in reports]
    # A rank's account of the turns counts only as one voice of the median (a short one: none).
    witnessed = [median([seen[t] for _, _, seen in reports if len(seen) > t]) for t in range(max(turn_of) + 1)]
    claims = [claimed_s(*figures[:2], n, nbytes, iters, series) for _, figures, _ in reports]
    rows = []
    for rank, (turn, (tflops, gbps, wrong), _) in enumerate(reports):
        claim = claims[rank]
        mates = [r for r, t in enumerate(turn_of) if t == turn]
        # How much longer than their claims the other turns ran (at least 1): a busy host's
        # load stretches every turn, not one rank's, and a CPU worker's claims are CPU time.
        pace = max(1.0, median([witnessed[t] / claims[r] for r, t in enumerate(turn_of)
                                if t != turn and claims[r] > 0]))
        slowest = max(claims[r] for r in mates)
        unexplained = witnessed[turn] > SLACK * pace * slowest + allow_s  # far longer than any claim
        refused = unexplained and witnessed[turn] > SLACK * pace * claim + allow_s
        if refused and len(mates) == 1 and witnessed[turn] > 0:
            # Alone in its turn: what its peers saw bounds what it did (the whole turn as its
            # loops, at the pace the other turns ran).
            scale = min(1.0, pace * claim / witnessed[turn])
            tflops, gbps = tflops * scale, gbps * scale
        rows.append(dict(rank=rank, device=models[rank], tflops=tflops, copy_gbps=gbps, wrong=wrong,
                         witnessed_s=witnessed[turn], claimed_s=claim, refused=refused,
                         judged=not refused or len(mates) == 1))
    out = pb.GpuCheckResult(matmul_n=n, dtype=dtype, copy_bytes=nbytes, series=series)
    for row in rows:
        same = [x for x in rows if x["device"] == row["device"] and x["judged"]]
        med_t, med_c = median([x["tflops"] for x in same]), median([x["copy_gbps"] for x in same])
        low_t, low_c = (flags.bound([x[k] for x in same], floor) for k in ("tflops", "copy_gbps"))
        fields = {k: v for k, v in row.items() if k != "judged"}
        low = row["tflops"] < low_t or row["copy_gbps"] < low_c
        out.workers.append(pb.GpuFigures(
            **fields, tflops_ratio=row["tflops"] / med_t if med_t > 0 else 0.0,
            copy_ratio=row["copy_gbps"] / med_c if med_c > 0 else 0.0, flag_tflops=low_t, flag_copy_gbps=low_c,
            flagged=row["judged"] and (row["wrong"] > 0 or (len(same) > 1 and low))))
    return out
