"""nccl-tests-style text tables and JSON for results and jobs (used by the CLI and the demo)."""

from __future__ import annotations

import json

from ringleader import spec as specs
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

HEADER = (
    "#{:>12} {:>12} {:>9} {:>6} {:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}\n"
    "#{:>12} {:>12} {:>9} {:>6} {:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>6}"
).format("size", "count", "type", "redop", "root", "time", "p50", "p99", "algbw", "busbw", "#wrong",
         "(B)", "(elements)", "", "", "", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "")

ROW = " {:>12} {:>12} {:>9} {:>6} {:>5} {:>10.2f} {:>10.2f} {:>10.2f} {:>8.2f} {:>8.2f} {:>6}"


def results_table(results) -> str:
    lines = [HEADER]
    for r in results:
        root = str(r.root) if r.op in ("reduce", "broadcast", "gather", "scatter") else "-1"
        redop = r.reduce_op if r.op in ("all_reduce", "reduce", "reduce_scatter") else "none"
        lines.append(ROW.format(r.size_bytes, r.count, r.dtype, redop, root, r.time_us, r.time_p50_us,
                                r.time_p99_us, r.algbw_gbps, r.busbw_gbps, r.wrong))
    if results:
        first = results[0]
        placement = "in-place" if specs.physically_in_place(first.op, first.in_place) else "out-of-place"
        lines.append(f"# {first.op}, {first.world_size} ranks, {placement}, "
                     f"{first.iters} iterations; slowest rank per size: "
                     + ",".join(str(r.slowest_rank) for r in results))
        lines.append(f"# Out of bounds values : {sum(r.wrong for r in results)} "
                     f"{'OK' if not any(r.wrong for r in results) else 'FAILED'}")
    return "\n".join(lines)


def state_name(state: int) -> str:
    return pb.JobState.Name(state)




def job_json(job: pb.Job) -> str:
    """The --json shape: {"job": {...without results}, "results": [...]}."""
    body = to_json(job)
    results = body.pop("results")
    return json.dumps({"job": body, "results": results}, indent=2)


def job_line(job: pb.Job) -> str:
    c = job.spec.collective
    return (f"{job.id}  {state_name(job.state):<9}  {c.op:<14} {c.dtype:<8} n={job.spec.world_size:<3} "
            f"{job.reason}")
