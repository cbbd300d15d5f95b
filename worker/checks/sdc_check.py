"""The silent data corruption check.

1. A deterministic computation: matrices made from a fixed seed on the host (so every device
   starts from the same bits), then `rounds` of x <- tanh(x @ w) on the device. On healthy
   devices of one model (same kernels, fixed reduction order) its bytes are the same bit for
   bit; their SHA-256 is compared across the gang and the odd one out is named.
2. Collectives on exactly representable data (small integers in float32): an all_reduce and an
   all_gather whose every element is known, counted wrong bit for bit (as a sweep's `wrong`).
   The all_gather keeps each rank's contribution apart: every receiver checks every sender's
   slice, and blame goes to the sender a majority of receivers name, never to the receivers
   (a rank that corrupts what it sends makes every other rank see wrong data).
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


def exact_collectives(rank: int, n: int, device, wrong_result: bool = False,
                      corrupt_share: bool = False) -> tuple[int, list[int]]:
    """(elements wrong after an all_reduce of small integers, elements wrong in each sender's
    slice of an all_gather): the gather keeps every rank's contribution apart, so a receiver can
    say who sent bad data, and a sender that corrupts its share is named by its receivers."""
    import torch
    import torch.distributed as dist

    # Below 31: a sum over up to SDC_MAX_RANKS ranks stays under 2^24, exact in float32.
    base = (torch.arange(_EXACT_N, dtype=torch.int64) % 31).to(torch.float32).to(device)
    share = base * (rank + 1)
    if corrupt_share:  # the fault injector's rogue (or a GPU corrupting what it sends)
        share[0] += 1
    dist.all_reduce(share)
    if wrong_result:  # the fault injector: one element changed after the op, on this rank only
        share[0] += 1
    reduce_wrong = int((share != base * (n * (n + 1) // 2)).sum().item())
    mine = base + rank
    if corrupt_share:
        mine = mine.clone()
        mine[0] += 1
    gathered = [torch.empty_like(base) for _ in range(n)]
    dist.all_gather(gathered, mine)
    # A rank does not judge its own slice: what it sent is for its receivers to judge.
    wrong_from = [0 if r == rank else int((g != base + r).sum().item()) for r, g in enumerate(gathered)]
    return reduce_wrong, wrong_from


def run_sdc_check(job: ValidJob, ctx: RunContext) -> Outcome:
    s = job.spec.sdc_check
    fault = faults.load()
    fault.before_op()
    digest = checksum(s.seed, s.rounds, ctx.device, flip_bit=bool(fault.flip_bit),
                      on_round=lambda r: ctx.progress(r, s.rounds, 0))
    reduce_wrong, wrong_from = exact_collectives(ctx.rank, job.world_size, ctx.device,
                                                 wrong_result=bool(fault.wrong_result),
                                                 corrupt_share=bool(fault.corrupt_share))
    everyone = peers.gather((peers.me(ctx.device).model, digest, reduce_wrong, wrong_from))
    return Outcome(message=sdc_result(everyone))


def sdc_result(per_rank: list[tuple[str, str, int, list[int]]]) -> pb.SdcCheckResult:
    """(model, checksum, reduce wrong, wrong per sender) per rank -> flags. A rank is flagged for
    a checksum other than the strict majority of its model's (with no strict majority nobody is
    named by checksum: the health book makes the disagreeing ones suspect), or as the sender of
    wrong data named by a strict majority of at least two receivers (verdicts.py judges the
    rest: a lone accuser, wrong sums no sender explains). No communication."""
    majority: dict[str, str] = {}
    for model in {p[0] for p in per_rank}:
        counts = Counter(p[1] for p in per_rank if p[0] == model)
        digest, count = counts.most_common(1)[0]
        if 2 * count > sum(counts.values()):
            majority[model] = digest
    n = len(per_rank)
    named_by = [sum(1 for r, p in enumerate(per_rank) if r != s and p[3][s] > 0) for s in range(n)]
    out = pb.SdcCheckResult()
    for rank, (model, digest, reduce_wrong, wrong_from) in enumerate(per_rank):
        odd = model in majority and digest != majority[model]
        out.workers.append(pb.SdcFigures(
            rank=rank, device=model, checksum=digest, collective_wrong=reduce_wrong + sum(wrong_from),
            flagged=odd or sender_named(named_by[rank], n), wrong_from=wrong_from, named_by=named_by[rank],
            reduce_wrong=reduce_wrong))
    models = sorted(majority)
    out.majority_checksum = majority[models[0]] if len(models) == 1 else ""
    return out


def sender_named(named_by: int, n: int) -> bool:
    """A strict majority of a sender's n - 1 receivers saw wrong data from it. With one receiver
    (n = 2) the accuser could be the faulty one as well as the accused: that names nobody."""
    return n >= 3 and 2 * named_by > n - 1
