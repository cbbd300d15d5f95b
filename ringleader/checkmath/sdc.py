"""The corruption check's judging, pure: checksums compared within each device model, and the
senders of wrong data in the exact collectives named by their receivers (worker/checks/sdc_check.py
measures)."""

from __future__ import annotations

from collections import Counter

from ringleader.v1 import jobs_pb2 as pb


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
