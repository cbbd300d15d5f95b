#!/usr/bin/env python3
"""ringleader against nccl-tests measured in the same run (bench/nccl_side.sh): the issue's goals
checked, then the tables. Nothing here measures.

    python bench/side_by_side.py NT_DIR BENCH_JSON [SMALL_LATENCY_JSON]

NT_DIR holds nccl-tests' logs named OP-small.log, OP-large.log (eager, -n 20), all_reduce-graph.log
(-G 20), all_reduce-n1000.log and all_reduce-iter.log (-I 1). Sizes follow nccl-tests' convention
(the op's largest buffer), as ringleader's do; out-of-place columns only.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

GRAPH_RATIO, EAGER_RATIO, BUSBW_RATIO, SMALL_GS_RATIO, WARM_P50_MS = 1.2, 1.2, 0.97, 1.3, 5.0
LARGE = 256 << 20


def parse_nccl_tests(path: Path) -> dict[int, dict]:
    """{size: {time_us, busbw, wrong[, min_us, max_us, p99_us]}} from one nccl-tests log (out of place)."""
    rows = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        t = line.split()
        if len(t) < 9 or not t[0].isdigit() or not t[1].isdigit():
            continue
        row = dict(time_us=float(t[5]), busbw=float(t[7]), wrong=t[8])
        if len(t) >= 13 and t[8].isdigit():  # -I 1: min max p99 cv follow the out-of-place columns
            row.update(min_us=float(t[9]), max_us=float(t[10]), p99_us=float(t[11]))
        rows[int(t[0])] = row
    return rows


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def goals(nt: Path, mine: dict, starts: dict, ngpu: int) -> list[str]:
    out = []

    def check(ok: bool, text: str) -> None:
        out.append(f"- {'PASS' if ok else 'FAIL'}: {text}")
    graph = parse_nccl_tests(nt / "all_reduce-graph.log")
    for size in sorted(s for s in graph if s <= 256 << 10):
        if (r := mine.get(("graph", "all_reduce", size))):
            ratio = r["time_us"] / graph[size]["time_us"]
            check(ratio <= GRAPH_RATIO, f"graph all_reduce {_size(size)}: {r['time_us']:.2f} us, {ratio:.2f} x "
                  f"nccl-tests -G {graph[size]['time_us']:.2f} (goal <= {GRAPH_RATIO})")
    eager = parse_nccl_tests(nt / "all_reduce-small.log").get(8)
    long = parse_nccl_tests(nt / "all_reduce-n1000.log").get(8)
    if (r := mine.get(("eager", "all_reduce", 8))) and eager:
        ratio = r["time_us"] / eager["time_us"]
        check(ratio <= EAGER_RATIO, f"eager all_reduce 8 B: {r['time_us']:.2f} us over {r['iters']} iterations, "
              f"{ratio:.2f} x nccl-tests -n 20 {eager['time_us']:.2f} us (goal <= {EAGER_RATIO})"
              + (f"; nccl-tests -n 1000: {long['time_us']:.2f} us" if long else ""))
    wrong = 0
    for (name, op, size), r in sorted(mine.items()):
        wrong += r["wrong"]
        if name != "eager":
            continue
        ref = parse_nccl_tests(nt / f"{op}-{'large' if size >= LARGE else 'small'}.log").get(size)
        if not ref:
            continue
        if size >= LARGE:
            ratio = r["busbw_gbps"] / ref["busbw"]
            check(ratio >= BUSBW_RATIO, f"{op} {_size(size)}: busbw {r['busbw_gbps']:.1f} GB/s, {ratio:.3f} x "
                  f"nccl-tests {ref['busbw']:.1f}")
        elif size == 16 << 20 and op in ("gather", "scatter"):
            ratio = r["time_us"] / ref["time_us"]
            check(ratio <= SMALL_GS_RATIO, f"{op} 16 MiB: {r['time_us']:.1f} us, {ratio:.2f} x nccl-tests "
                  f"{ref['time_us']:.1f} (goal <= {SMALL_GS_RATIO})")
    check(wrong == 0, f"wrong elements over every ringleader row: {wrong}")
    warm = starts.get("warm_ms") or []
    if warm:
        p50 = statistics.median(warm)
        check(p50 <= WARM_P50_MS, f"warm job start (submit to SUCCEEDED, trivial {ngpu}-rank job, {len(warm)} jobs): "
              f"p50 {p50:.2f} ms, p90 {warm[int(0.9 * (len(warm) - 1))]:.2f}, max {warm[-1]:.2f} (goal p50 <= "
              f"{WARM_P50_MS} ms)")
    return out


def table(nt: Path, mine: dict) -> list[str]:
    lines = ["| op | size | nccl-tests us | ringleader us (iters) | time ratio | nccl-tests busbw | ringleader busbw "
             "| busbw ratio | ringleader p99 / max us | wrong |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (name, op, size), r in sorted(mine.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        if name != "eager":
            continue
        ref = parse_nccl_tests(nt / f"{op}-{'large' if size >= LARGE else 'small'}.log").get(size, {})
        t, b = ref.get("time_us"), ref.get("busbw")
        lines.append(f"| {op} | {_size(size)} | {t or ''} | {r['time_us']:.2f} ({r['iters']}) | "
                     f"{r['time_us'] / t if t else 0:.2f} | {b if b is not None else ''} | {r['busbw_gbps']:.1f} | "
                     f"{r['busbw_gbps'] / b if b else 0:.3f} | {r['time_p99_us']:.1f} / {r.get('time_max_us', 0):.1f} "
                     f"| {r['wrong']} |")
    return lines


def graph_and_iter_table(nt: Path, mine: dict) -> list[str]:
    graph = parse_nccl_tests(nt / "all_reduce-graph.log")
    per_iter = parse_nccl_tests(nt / "all_reduce-iter.log")
    lines = ["| all_reduce size | nccl-tests -G us | ringleader graph us (ops) | ratio | nccl-tests -I p99 / max us "
             "| ringleader eager p99 / max us |", "|---:|---:|---:|---:|---:|---:|"]
    for size in sorted(graph):
        g, e, it = mine.get(("graph", "all_reduce", size)), mine.get(("eager", "all_reduce", size)), per_iter.get(size, {})
        lines.append(f"| {_size(size)} | {graph[size]['time_us']} | "
                     + (f"{g['time_us']:.2f} ({g['iters']}) | {g['time_us'] / graph[size]['time_us']:.2f}" if g else " | ")
                     + f" | {it.get('p99_us', '')} / {it.get('max_us', '')} | "
                     + (f"{e['time_p99_us']:.1f} / {e.get('time_max_us', 0):.1f}" if e else "") + " |")
    return lines


def small_ab(rows: list[dict]) -> list[str]:
    lines = ["| op | size | mode | torch.distributed us | NCCL direct us | torch / direct | wrong |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for a, b in zip(rows[::2], rows[1::2]):
        lines.append(f"| {a['op']} | {_size(a['size'])} | {a['mode']} | {a['mean_us']:.2f} | {b['mean_us']:.2f} | "
                     f"{a['mean_us'] / b['mean_us']:.2f} | {a['wrong'] + b['wrong']} |")
    return lines


def main() -> None:
    nt, bench = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    mine = {(r["bench_pass"], r["op"], int(r["size_bytes"])): r for r in bench["rows"]}
    m = bench["machine"]
    out = [f"# ringleader and nccl-tests side by side, {len(m['gpus'])} GPUs, {m['date']}", "",
           f"Machine: {', '.join(m['gpus'])}; torch {m['torch']} (CUDA {m['cuda']}), NCCL {m['nccl']}, "
           f"NCCL_NVLS_ENABLE={m['NCCL_NVLS_ENABLE']}. nccl-tests: -g {len(m['gpus'])} (one process), float32, out of place, "
           "-n 20 -w 5 -c 1 unless said; ringleader: `worker --device all`, iterations calibrated per size.", "",
           "## Goals", "", *goals(nt, mine, bench.get("starts", {}), len(m["gpus"])), "",
           "## all_reduce: graph mode and per-iteration statistics", "", *graph_and_iter_table(nt, mine), "",
           "## Eager, every op", "", *table(nt, mine), ""]
    if len(sys.argv) > 3 and Path(sys.argv[3]).exists():
        out += ["## torch.distributed's call against NCCL called directly (bench/small_latency.py)", "",
                *small_ab(json.loads(Path(sys.argv[3]).read_text())), ""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
