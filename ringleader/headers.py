"""Each job kind's one-line header, as the web UI shows it above a job ("gpu_check · 8192 ·
bf16"), found by the kind table's `header` column (ringleader/kinds.py: `kinds.header(spec)`).

A header names the kind and the few settings that tell two jobs of it apart; a setting left unset
(the runner's default applies) is left out rather than guessed.
"""

from __future__ import annotations

from ringleader.spec import format_size
from ringleader.v1 import jobs_pb2 as pb

SEP = " · "


def _sizes(sizes, lo: int, hi: int) -> str:
    if sizes:
        return format_size(min(sizes)) + ("" if len(sizes) == 1 else f"..{format_size(max(sizes))}")
    if lo or hi:
        return f"{format_size(lo)}..{format_size(hi)}"
    return ""


def _join(*parts: str) -> str:
    return SEP.join(p for p in parts if p)


def collective_header(spec: pb.JobSpec) -> str:
    c = spec.collective
    return _join(c.op or "collective", _sizes(c.sizes, c.min_bytes, c.max_bytes), c.dtype, c.algo)


def p2p_header(spec: pb.JobSpec) -> str:
    p = spec.p2p
    return _join("p2p", p.mode, "pairwise" if p.pairwise else "", _sizes(p.sizes, p.min_bytes, p.max_bytes))


def gradient_average_header(spec: pb.JobSpec) -> str:
    g = spec.gradient_average
    return _join("gradient_average", format_size(g.size_bytes) if g.size_bytes else "")


def train_header(spec: pb.JobSpec) -> str:
    t = spec.train
    return _join("training", t.model, f"{t.steps} steps" if t.HasField("steps") else "",
                 f"batch {t.batch_size}" if t.HasField("batch_size") else "")


def algo_sweep_header(spec: pb.JobSpec) -> str:
    a = spec.algo_sweep
    return _join("algo_sweep", ",".join(a.algos), _sizes(a.sizes, a.min_bytes, a.max_bytes), a.dtype)


def link_matrix_header(spec: pb.JobSpec) -> str:
    m = spec.link_matrix
    return _join("link_matrix", format_size(m.size_bytes) if m.size_bytes else "",
                 f"{m.iters} iters" if m.iters else "")


def gpu_check_header(spec: pb.JobSpec) -> str:
    g = spec.gpu_check
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(g.dtype, g.dtype)
    return _join("gpu_check", str(g.matmul_n) if g.matmul_n else "", dtype)


def sdc_check_header(spec: pb.JobSpec) -> str:
    s = spec.sdc_check
    return _join("sdc_check", f"{s.rounds} rounds" if s.rounds else "", f"seed {s.seed}" if s.seed else "")
