"""nccl-tests-style text tables and the JSON documents for results, jobs, workers and logs (used
by the CLI and the demo). The JSON shapes are the REST API's where it has one (`to_json` of the
messages), with times as RFC 3339 and only the job's own kind (ringleader_app/render.py)."""

from __future__ import annotations

import json

from ringleader import kinds
from ringleader import spec as specs
from ringleader_app.render import times
from ringleader.jobspec import op_name
from ringleader.leanjson import lean_job
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

HEADER = (
    "#{:>12} {:>12} {:>9} {:>6} {:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6} {:>6}\n"
    "#{:>12} {:>12} {:>9} {:>6} {:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6} {:>6}"
).format("size", "count", "type", "redop", "root", "time", "p50", "p99", "algbw", "busbw", "#wrong", "iters",
         "(B)", "(elements)", "", "", "", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "")

ROW = " {:>12} {:>12} {:>9} {:>6} {:>5} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.2f} {:>8.2f} {:>6} {:>6}"


def results_table(results) -> str:
    lines = [HEADER]
    for r in results:
        root = str(r.root) if r.op in ("reduce", "broadcast", "gather", "scatter") else "-1"
        redop = r.reduce_op if r.op in ("all_reduce", "reduce", "reduce_scatter") else "none"
        lines.append(ROW.format(r.size_bytes, r.count, r.dtype, redop, root, r.time_us, r.time_p50_us,
                                r.time_p99_us, r.algbw_gbps, r.busbw_gbps, r.wrong, r.iters))
    if results:
        first = results[0]
        placement = "in-place" if specs.physically_in_place(first.op, first.in_place, first.algo) else "out-of-place"
        how = ", ".join(x for x in (first.algo, first.mode and f"{first.mode} mode") if x)
        lines.append(f"# {first.op}, {first.world_size} ranks, {placement}{', ' + how if how else ''}; "
                     "slowest rank per size: " + ",".join(str(r.slowest_rank) for r in results))
        lines.append(f"# Out of bounds values : {sum(r.wrong for r in results)} "
                     f"{'OK' if not any(r.wrong for r in results) else 'FAILED'}")
        # nccl-tests' footer, which health scripts grep for: the mean busbw over the sizes
        lines.append(f"# Avg bus bandwidth    : {sum(r.busbw_gbps for r in results) / len(results):g} ")
    return "\n".join(lines)


def size_label(n: int) -> str:
    """A size in nccl-tests' binary units, said as such: 8 B, 1KiB, 64MiB (1K = 1024 bytes)."""
    text = specs.format_size(n)
    return text + "iB" if text[-1] in "KMG" else f"{text} B"


def state_name(state: int) -> str:
    return pb.JobState.Name(state)


def job_doc(job: pb.Job) -> dict:
    """The -o json|yaml document: GET /api/v1/jobs/ID's, from the same function (its results
    inside; an algo sweep's dispatch table is its outcome's `table`)."""
    return lean_job(job)


def job_json(job: pb.Job) -> str:
    return json.dumps(job_doc(job), indent=2)


def jobs_doc(page: pb.ListJobsResponse) -> dict:
    """`jobs -o json`: GET /api/v1/jobs's document, {"jobs": [job without results], "next_before"}."""
    return {"jobs": [lean_job(j, results=False) for j in page.jobs], "next_before": page.next_before_id or None}


def workers_doc(workers) -> dict:
    return {"workers": [times(to_json(w)) for w in workers]}


def logs_text(logs: pb.JobLogs) -> str:
    """Each rank's log under a header naming the rank and its worker."""
    parts = []
    for r in logs.ranks:
        if not r.received:
            parts.append(f"==> rank {r.rank} ({r.worker_id}): no log: the rank has not reported its end <==")
            continue
        parts.append(f"==> rank {r.rank} ({r.worker_id}) <==")
        parts.append(r.text.rstrip("\n") if r.text else "(no output)")
    return "\n".join(parts) if parts else f"job {logs.job_id} has not been placed on workers: no logs"


def job_line(job: pb.Job) -> str:
    dtype = job.spec.collective.dtype if job.spec.HasField("collective") else ""
    return (f"{job.id}  {state_name(job.state):<9}  {op_name(job.spec):<16} {dtype:<8} "
            f"n={job.spec.world_size:<3} {job.reason}")


def p2p_table(r: pb.P2PResult) -> str:
    lines = [f"#{'src':>4} {'dst':>4} {'size (B)':>12} {'mode':>9} {'latency (us)':>13} {'min (us)':>10} "
             f"{'bw (GB/s)':>10} {'#wrong':>7}"]
    for row in r.rows:
        lines.append(f" {row.src:>4} {row.dst:>4} {row.size_bytes:>12} {row.mode:>9} {row.latency_us:>13.2f} "
                     f"{row.latency_min_us:>10.2f} {row.bandwidth_gbps:>10.2f} {row.wrong:>7}")
    if r.matrix:
        n = len(r.matrix)
        lines.append(f"# bandwidth matrix at {size_label(r.matrix_size_bytes)}, GB/s (row: src, column: dst); "
                     f"median {r.median_gbps:.2f}")
        lines.append("#     " + "".join(f"{j:>9}" for j in range(n)))
        for i, row in enumerate(r.matrix):
            lines.append(f" {i:>4} " + "".join(f"{'-':>9}" if g < 0 else f"{g:>9.2f}" for g in row.gbps))
        for f in r.flagged:
            lines.append(f"# SLOW: {f.src} -> {f.dst} {f.gbps:.2f} GB/s ({f.ratio_to_median:.2f} of the median)")
    return "\n".join(lines)


def gradient_average_table(r: pb.GradientAverageResult) -> str:
    return "\n".join([
        f"# gradient average of {size_label(r.size_bytes)} float32 over {r.world_size} ranks, {r.iters} iterations",
        f"  on device (all_reduce):          {r.device_time_us:12.2f} us   {'ok' if r.device_ok else 'WRONG'}",
        f"  host-staged (copy, gloo, copy):  {r.host_time_us:12.2f} us   {'ok' if r.host_ok else 'WRONG'}",
        f"  speedup of the device path:      {r.speedup:12.2f} x   (max relative error {r.max_rel_error:.2e})",
    ])


def train_table(r: pb.TrainResult) -> str:
    loss = ", ".join(f"{x:.4f}" for x in r.loss[:3]) + (" ... " + f"{r.loss[-1]:.4f}" if len(r.loss) > 3 else "")
    return "\n".join([
        f"# train {r.model} ({r.params} parameters), {r.world_size} ranks x batch {r.batch_size}, "
        f"{r.steps} steps, lr {r.lr}",
        f"  loss:            {loss}",
        f"  step time:       {r.step_time_ms:.3f} ms (compute {r.compute_ms:.3f} ms, all_reduce {r.comm_ms:.3f} ms, "
        f"communication share {r.comm_share:.1%})",
        f"  throughput:      {r.samples_per_s:,.0f} samples/s",
        f"  replicas agree:  max |param difference| across ranks = {r.param_max_abs_diff:g}",
    ])


def dispatch_table(r: pb.AlgoSweepResult) -> dict:
    """The dispatch table an inference engine loads: for a message of m bytes, the first row of
    `table` with m <= max_bytes (max_bytes null: every larger size) names the algo to use.

        {"op": "all_reduce", "dtype": "bfloat16", "world_size": 2, "mode": "graph",
         "table": [{"max_bytes": 65536, "algo": "symm:one_shot"}, {"max_bytes": null, "algo": "nccl"}],
         "measured": [{"size_bytes": 8, "algo": "symm:one_shot", "time_us": 3.9, "speedup": 1.8}, ...]}

    measured: per size, the fastest algo, its time and its speedup over the backend's own (0:
    not measured there). Boundaries are measured sizes: between two of them the larger's row
    applies, so sweep with a fine factor near the crossovers that matter.
    """
    return {"op": r.op, "dtype": r.dtype, "world_size": r.world_size, "mode": r.mode,
            "table": [{"max_bytes": t.max_bytes or None, "algo": t.algo} for t in r.table],
            "measured": [{"size_bytes": b.size_bytes, "algo": b.algo, "time_us": b.time_us, "speedup": b.speedup}
                         for b in r.best]}


def algo_sweep_table(r: pb.AlgoSweepResult) -> str:
    """Per size: every algo's time (us), the fastest, its speedup; then the crossovers and the
    dispatch table as one line of JSON."""
    times = {(x.size_bytes, x.algo): x for x in r.results}
    best = {b.size_bytes: b for b in r.best}
    sizes = sorted({x.size_bytes for x in r.results})
    width = max([14, *(len(a) + 1 for a in r.algos)])
    lines = [f"# {r.op} {r.dtype}, {r.world_size} ranks, {r.mode} mode: time per op (us); "
             "* fastest, ! wrong elements, - not run",
             f"#{'size (B)':>12}" + "".join(f"{a:>{width}}" for a in r.algos) + f"{'fastest':>{width}}{'speedup':>9}"]
    for size in sizes:
        cells = []
        for a in r.algos:
            x = times.get((size, a))
            mark = "-" if x is None else "!" if x.wrong else "*" if size in best and best[size].algo == a else ""
            cells.append(f"{(f'{x.time_us:.2f}' if x else '') + mark:>{width}}")
        b = best.get(size)
        lines.append(f" {size:>12}" + "".join(cells) + (f"{b.algo:>{width}}{b.speedup:>8.2f}x" if b else ""))
    for t in r.table:
        upto = f"up to {size_label(t.max_bytes)}" if t.max_bytes else "and above"
        lines.append(f"# {size_label(t.min_bytes)} {upto}: {t.algo}")
    lines.append("# dispatch table: " + json.dumps(dispatch_table(r)["table"]))
    return "\n".join(lines)


def outcome_table(job: pb.Job) -> str:
    """The job's results, whatever its kind ("" when it has none yet): its kind's table."""
    kind = kinds.get(job.spec.WhichOneof("kind") or "")
    if kind.result:
        outcome = getattr(job, kind.result) if job.HasField(kind.result) else None
    else:
        outcome = job.results or None
    return "" if outcome is None else kind.resolve("table")(outcome)
