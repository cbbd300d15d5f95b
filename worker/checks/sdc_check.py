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
from ringleader import checks
from ringleader.jobspec import ValidJob
from ringleader.checkmath.sdc import sdc_result
from ringleader.v1 import workers_pb2 as wpb
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
    # Each rank reports only its own figures; the coordinator assembles and judges them
    # (ringleader/checkmath/sdc.py). The gathered result is this rank's view, never reported.
    model = peers.me(ctx.device).model
    everyone = peers.gather((model, digest, reduce_wrong, wrong_from))
    return Outcome(message=sdc_result(everyone), evidence=wpb.H49eSdcEvidence(
        device=model, checksum=digest, reduce_wrong=reduce_wrong, wrong_from=wrong_from))
