"""The CLI's listings, in kubectl's manner: a header row always, "No jobs found." when there is
nothing to list, an AGE column, and `-o wide` for the columns a narrow terminal can do without."""

from __future__ import annotations

import time

from ringleader_app.render import rfc3339
from ringleader.jobspec import op_name
from ringleader.v1 import jobs_pb2 as pb


def age(seconds: float) -> str:
    """kubectl's short ages: 42s, 7m, 5h, 3d."""
    s = max(0, int(seconds))
    for unit, scale, below in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if s < below:
            return f"{s // scale}{unit}"
    return f"{s // 86400}d"


def _rows(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns three spaces apart (kubectl's look); the last column is not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join("   ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip() for r in [header, *rows])


def group_probes(jobs, keep: bool) -> None:
    """Jobs that work for another (spec.parent_id: localize's probes) out of the listing `jobs`
    (a repeated field, changed in place); with `keep`, each right after the job it works for
    (probes whose job is on another page stay where they were, at the end)."""
    probes: dict[str, list[pb.Job]] = {}
    order = []
    for job in jobs:
        if job.spec.parent_id:
            probes.setdefault(job.spec.parent_id, []).append(job)
        else:
            order.append(job)
    if keep:
        order = [x for job in order for x in [job, *probes.pop(job.id, [])]]
        order += [p for rest in probes.values() for p in rest]
    copies = [pb.Job.FromString(j.SerializeToString()) for j in order]
    del jobs[:]
    jobs.extend(copies)


def jobs_table(jobs, wide: bool = False, now: float | None = None) -> str:
    if not jobs:
        return "No jobs found."
    now = time.time() if now is None else now
    header = ["ID", "STATE", "OP", "DTYPE", "RANKS", "AGE"]
    if wide:
        header += ["BACKEND", "NAME", "CREATED", "WORKERS"]
    rows = []
    for job in jobs:
        dtype = job.spec.collective.dtype if job.spec.HasField("collective") else "-"
        shown = f"└ {job.id}" if job.spec.parent_id else job.id  # a probe, under the job it works for
        row = [shown, pb.JobState.Name(job.state), op_name(job.spec), dtype or "-", str(job.spec.world_size),
               age(now - job.created_at)]
        if wide:
            row += [job.backend or "-", job.spec.name or "-", rfc3339(job.created_at),
                    ",".join(w.worker_id for w in sorted(job.workers, key=lambda w: w.rank)) or "-"]
        rows.append(row + [job.reason])
    return _rows(header + ["REASON"], rows)


def health(h: pb.WorkerHealth) -> str:
    """A worker's verdict in one word, "cordoned" beside it when quarantined by hand, "breaker-held"
    when it failed but the circuit breaker left it in service (an operator decides)."""
    word = pb.Verdict.Name(h.verdict) if h.verdict else "-"
    return word + (",cordoned" if h.cordoned else ",breaker-held" if h.breaker_held else "") + (",observed" if h.observe_only else "")


def workers_table(workers, wide: bool = False, now: float | None = None) -> str:
    if not workers:
        return "No workers found."
    now = time.time() if now is None else now
    header = ["WORKER", "STATE", "DEVICE", "HOST", "JOB", "WARM", "HEALTH", "AGE"]
    if wide:
        header += ["ADDRESS", "BACKEND", "VERSION", "RESTARTS", "CONFIG"]
    rows = []
    for w in workers:
        row = [w.worker_id, pb.WorkerState.Name(w.state), f"{w.device.type}:{w.device.index} {w.device.name}"[:26],
               w.host, w.job_id or "-", "yes" if w.warm_group else "-", health(w.health),
               age(now - w.connected_at) if w.connected_at else "-"]
        if wide:
            row += [w.address or "-", w.backend or "-", w.version or "-", str(w.executor_restarts),
                    w.config_drift or "-"]
        rows.append(row)
    return _rows(header, rows)
