"""bench.md from bench/run.py's measurements: the issue's goals checked first, then the tables.

References are nccl-tests' numbers on the same machine type (bench/nccl_tests_reference.json,
copied from shared/BASELINES.md); a goal without a reference for this GPU count is skipped
and says so. Nothing here measures: it only compares what run.py measured.
"""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import json_format

from ringleader import algos
from ringleader import spec as specs
from ringleader_app.table import algo_sweep_table
from ringleader.v1 import jobs_pb2 as pb

REFERENCE = json.loads((Path(__file__).parent / "nccl_tests_reference.json").read_text())
SYMM_GOAL_MAX = 64 << 10


def _size(n: int) -> str:
    return specs.format_size(n) + "B"


def _busbw(op: str, size: int, time_us: float, n: int) -> float:
    return size / time_us / 1e3 * specs.busbw_factor(op, n) if time_us > 0 else 0.0


def goals(plain: list[dict], ours: list[dict], sweeps: list[dict], n: int) -> list[str]:
    ref, goal = REFERENCE["busbw_gbps"].get(str(n), {}), REFERENCE["goals"]
    times = REFERENCE["all_reduce_time_us"].get(str(n), {})
    mine = {(r["bench_pass"], r["op"], r["size_bytes"]): r for r in ours}
    out = []

    def check(ok: bool, text: str) -> None:
        out.append(f"- {'PASS' if ok else 'FAIL'}: {text}")

    for size in (8, 4096, 262144):
        r, limit = mine.get(("graph", "all_reduce", size)), times.get(f"graph_{size}")
        if r and limit:
            bound = goal["graph_all_reduce_time_ratio_max"] * limit
            check(r["time_us"] <= bound, f"graph all_reduce {_size(size)}: {r['time_us']:.2f} us "
                  f"(limit {bound:.2f} = {goal['graph_all_reduce_time_ratio_max']} x nccl-tests -G {limit})")
    eager_limit = goal["eager_all_reduce_8B_max_us"].get(str(n))
    if (r := mine.get(("eager", "all_reduce", 8))) and eager_limit:
        check(r["time_us"] <= eager_limit, f"eager all_reduce 8B: {r['time_us']:.2f} us over {r['iters']} "
              f"iterations (limit {eager_limit}; nccl-tests eager {times.get('eager_8')})")
    for size, per_op in sorted((int(s), v) for s, v in ref.items()):
        for op, nccl in per_op.items():
            if (r := mine.get(("eager", op, size))) is not None:
                ratio = r["busbw_gbps"] / nccl
                check(ratio >= goal["busbw_ratio_min"], f"{op} {_size(size)}: busbw {r['busbw_gbps']:.1f} GB/s, "
                      f"{ratio:.3f} x nccl-tests {nccl}")
    for sweep in sweeps:
        if sweep["mode"] != "graph" or n != 2:
            continue
        at = {(x["size_bytes"], x["algo"]): x["time_us"] for x in sweep["results"] if not x["wrong"]}
        for size in sorted({s for s, _ in at if s <= SYMM_GOAL_MAX}):
            symm = min((at[size, a], a) for a in algos.SYMM_ALGOS if (size, a) in at) if any(
                (size, a) in at for a in algos.SYMM_ALGOS) else None
            nccl = at.get((size, "nccl"))
            if symm and nccl:
                check(symm[0] < nccl, f"{symm[1]} {_size(size)} in graph mode: {symm[0]:.2f} us against "
                      f"NCCL's {nccl:.2f} us")
    return out or ["- (no goal has a reference for this GPU count)"]


def small_table(plain: list[dict], ours: list[dict], n: int) -> list[str]:
    """Time per op (us) up to 1 MiB: ringleader's passes beside plain torch's."""
    by = {(r["bench_pass"], r["op"], r["size_bytes"]): r for r in ours}
    by.update({(f"plain-{r['mode']}", r["op"], r["size_bytes"]): r for r in plain})
    lines = ["| op | size | eager (iters) | eager, 20 iterations | graph (iters) | plain eager | plain graph |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    keys = sorted({(op, s) for (_, op, s) in by if s <= 1 << 20})

    def cell(name, op, size, iters=False):
        r = by.get((name, op, size))
        return "" if r is None else f"{r['time_us']:.2f}" + (f" ({r['iters']})" if iters else "")
    for op, size in sorted(keys, key=lambda k: (k[0], k[1])):
        lines.append(f"| {op} | {_size(size)} | {cell('eager', op, size, True)} | {cell('eager20', op, size)} | "
                     f"{cell('graph', op, size, True)} | {cell('plain-eager', op, size)} | "
                     f"{cell('plain-graph', op, size)} |")
    return lines


def large_table(plain: list[dict], ours: list[dict], n: int) -> list[str]:
    """busbw of ringleader (eager, calibrated) against plain torch and nccl-tests, from 1 MiB."""
    ref = REFERENCE["busbw_gbps"].get(str(n), {})
    base = {(r["op"], r["size_bytes"]): r for r in plain if r["mode"] == "eager"}
    lines = ["| op | size | ringleader time (us) | ringleader busbw (GB/s) | plain busbw | ratio to plain | "
             "nccl-tests busbw | ratio to nccl-tests | wrong |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in (r for r in ours if r["bench_pass"] == "eager" and r["size_bytes"] >= 1 << 20):
        p = base.get((r["op"], r["size_bytes"]))
        pb_ = _busbw(r["op"], r["size_bytes"], p["time_us"], n) if p else 0.0
        nt = ref.get(str(r["size_bytes"]), {}).get(r["op"])
        lines.append(f"| {r['op']} | {_size(r['size_bytes'])} | {r['time_us']:.2f} | {r['busbw_gbps']:.2f} | "
                     f"{pb_:.2f} | {(p['time_us'] / r['time_us']) if p else 0:.3f} | {nt or ''} | "
                     f"{(r['busbw_gbps'] / nt) if nt else 0:.3f} | {r['wrong']} |")
    return lines


def report(plain: list[dict], ours: list[dict], extra: dict, n: int, info: dict) -> str:
    starts = extra["starts"]
    lines = [f"# ringleader against plain torch.distributed and nccl-tests, {n} GPUs", "",
             f"Machine: {', '.join(info['gpus'])}; torch {info['torch']} (CUDA {info['cuda']}), NCCL {info['nccl']}, "
             f"Python {info['python']}; NCCL_NVLS_ENABLE={info['NCCL_NVLS_ENABLE']}; {info['date']}.",
             "float32, out-of-place (all_reduce/reduce/broadcast are in place in torch's API, in every column). "
             "ringleader's eager and graph passes choose their iterations per size (iters auto: a loop of at "
             "least 20 ms and 20 iterations); eager20 and plain use 20, as nccl-tests.", "",
             f"Trivial 8 B all_reduce job, submit to SUCCEEDED through the gRPC API: cold group "
             f"{starts['cold_job_s'] * 1e3:.1f} ms, warm group {starts['warm_job_s'] * 1e3:.1f} ms.", "",
             "## The issue's goals", "", f"nccl-tests references: {REFERENCE['source']}.", "",
             *goals(plain, ours, extra["sweeps"], n), "",
             "## Small messages: time per op (us)", "", *small_table(plain, ours, n), "",
             "## Large messages: bus bandwidth", "", *large_table(plain, ours, n), ""]
    for sweep in extra["sweeps"]:
        result = json_format.ParseDict(sweep, pb.AlgoSweepResult())
        lines += [f"## Algo sweep, {result.mode} mode", "", "```", algo_sweep_table(result), "```", ""]
    return "\n".join(lines)
