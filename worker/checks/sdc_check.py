"""The silent data corruption check.

1. A deterministic computation: matrices made from a fixed seed on the host (so every device
   starts from the same bits), then `rounds` of x <- tanh(x @ w) on the device. On healthy
   devices of one model (same kernels, fixed reduction order) its bytes are the same bit for
   bit; their SHA-256 is compared across the gang and the odd one out is named.
2. Collectives on exactly representable data (small integers in float32): an all_reduce and an
   all_gather whose every element is known, counted wrong bit for bit (as a sweep's `wrong`).
"""

from __future__ import annotations

import hashlib
from collections import Counter

from ringleader import checks
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from worker import faults
from worker.checks import peers
from worker.kinds import Outcome, RunContext

_EXACT_N = 1 << 16  # elements of the exact collectives


def checksum(seed: int, rounds: int, device, flip_bit: bool = False, on_round=None) -> str:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(checks.SDC_N, checks.SDC_N, generator=gen, dtype=torch.float32).to(device)
    w = (torch.randn(checks.SDC_N, checks.SDC_N, generator=gen, dtype=torch.float32) / checks.SDC_N ** 0.5).to(device)
    for r in range(rounds):
        x = torch.tanh(x @ w)
        if flip_bit and r == 0:  # the fault injector's flipped bit, early enough to spread
            x.view(torch.int32)[7, 11] ^= 1 << 22
        if on_round:
            on_round(r)
    return hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()


def exact_collectives_wrong(rank: int, n: int, device, wrong_result: bool = False) -> int:
    """Elements wrong after an all_reduce (sum) and an all_gather of small integers."""
    import torch
    import torch.distributed as dist

    # Below 31: a sum over up to SDC_MAX_RANKS ranks stays under 2^24, exact in float32.
    base = (torch.arange(_EXACT_N, dtype=torch.int64) % 31).to(torch.float32).to(device)
    reduced = base * (rank + 1)
    dist.all_reduce(reduced)
    if wrong_result:  # the fault injector: one element changed after the op
        reduced[0] += 1
    wrong = int((reduced != base * (n * (n + 1) // 2)).sum().item())
    gathered = [torch.empty_like(base) for _ in range(n)]
    dist.all_gather(gathered, base + rank)
    return wrong + sum(int((g != base + r).sum().item()) for r, g in enumerate(gathered))


def run_sdc_check(job: ValidJob, ctx: RunContext) -> Outcome:
    s = job.spec.sdc_check
    fault = faults.load()
    fault.before_op()
    digest = checksum(s.seed, s.rounds, ctx.device, flip_bit=bool(fault.flip_bit),
                      on_round=lambda r: ctx.progress(r, s.rounds, 0))
    wrong = exact_collectives_wrong(ctx.rank, job.world_size, ctx.device, wrong_result=bool(fault.wrong_result))
    everyone = peers.gather((peers.me(ctx.device).model, digest, wrong))
    return Outcome(message=sdc_result(everyone))


def sdc_result(per_rank: list[tuple[str, str, int]]) -> pb.SdcCheckResult:
    """(model, checksum, wrong) per rank -> flags: a checksum other than the strict majority of
    its model's, or any wrong element. With no strict majority nobody is named by checksum (the
    health book makes the disagreeing ones suspect). No communication."""
    majority: dict[str, str] = {}
    for model in {m for m, _, _ in per_rank}:
        counts = Counter(d for m, d, _ in per_rank if m == model)
        digest, count = counts.most_common(1)[0]
        if 2 * count > sum(counts.values()):
            majority[model] = digest
    out = pb.SdcCheckResult()
    for rank, (model, digest, wrong) in enumerate(per_rank):
        odd = model in majority and digest != majority[model]
        out.workers.append(pb.SdcFigures(rank=rank, device=model, checksum=digest, collective_wrong=wrong,
                                         flagged=odd or wrong > 0))
    models = sorted(majority)
    out.majority_checksum = majority[models[0]] if len(models) == 1 else ""
    return out
