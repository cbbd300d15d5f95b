"""Link baselines: every link a link check measures (a pair of workers, at the check's size) keeps a
baseline of its own, with the entries and the rule of a collective's (baselines.py): the median
of its last results, low results kept out of the window, a regression on REPEAT low results
among the last RECENT, and the slower drift detector beside it. So a link that steps down is
raised on its next checks and never becomes its own normal, whatever its peers of the same check
read (a host whose links all slowed alike shifts the check's median with it; not its baselines).

The key names the link by its two workers (sorted, in the entry's `algo` field) under op
"link_matrix"; the row's `baseline_ratio` is its figure over the baseline as it stood before this
result (0 while the link has none). A row whose two ends disagree, or whose bytes were wrong,
is judged by the check but feeds no baseline: its figure is disputed."""

from __future__ import annotations

import hashlib

from coordinator.health import baselines as bl
from ringleader.v1 import jobs_pb2 as pb

LINK_DTYPE = "uint8"  # the check moves bytes


def link_name(a: str, b: str) -> str:
    """The link's two workers as the key's `algo` field: printable, no '|', at most 64 characters."""
    name = "~".join(sorted((a, b))).replace("|", "/")
    if len(name) <= bl.TEXT_LIMITS["algo"] and name.isprintable():
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{a[:24]}~{b[:24]}#{digest}".replace("|", "/")


def entry_for(link: pb.LinkRow, worker_of: dict[int, str], host_of: dict[int, str],
              model_of: dict[int, str]) -> pb.BaselineEntry:
    """An empty baseline for the link's key."""
    models = sorted({model_of.get(r) or "unknown" for r in (link.a, link.b)})
    hosts = len({host_of.get(link.a, ""), host_of.get(link.b, "")})
    e = pb.BaselineEntry(gpu_model="+".join(models), op=bl.LINK_OP, dtype=LINK_DTYPE,
                         size_bucket=bl.size_bucket(link.size_bytes), ranks=2, hosts=hosts,
                         link=bl.link_kind(hosts), mode="eager",
                         algo=link_name(worker_of.get(link.a, str(link.a)), worker_of.get(link.b, str(link.b))))
    e.key = bl.entry_key(e)
    return e


def record(store, result: pb.LinkMatrixResult, workers: list[pb.WorkerRef], models: list[str],
           at: float) -> list[bl.Regression]:
    """What the control core calls when a link check's result is assembled: each row gets its
    baseline ratio, then feeds its link's baseline (in place; `store`: a JobStore). `workers`: the
    gang by rank, `models`: each rank's GPU model. Returns the regressions the rows raised."""
    worker_of = {w.rank: w.worker_id for w in workers}
    host_of = {w.rank: w.host for w in workers}
    model_of = dict(enumerate(models))
    found = []
    for link in result.links:
        fresh = entry_for(link, worker_of, host_of, model_of)
        e = store.baseline(fresh.key) or fresh
        link.baseline_ratio = link.gbps / e.median_busbw_gbps if e.samples and e.median_busbw_gbps > 0 else 0.0
        if link.wrong or link.ends_disagree or not link.gbps > 0:
            continue
        if (regression := bl.observe(e, link.gbps, at)) is not None:
            found.append(regression)
        store.put_baseline(e)
    return found
