"""Each job kind's one-line header, as the web UI shows it above a job ("GPU check · matrix
product 8192² bfloat16"), found by the kind table's `header` column (ringleader/kinds.py:
`kinds.header(spec)`) and served by GET /api/v1/jobs/{id}/header, which the job page reads.

A header names the kind and the few settings that tell two jobs of it apart; a setting left unset
(the runner's default applies) is left out rather than guessed.
"""

from __future__ import annotations

from ringleader.spec import REDUCING_OPS, ROOTED_OPS, format_size, physically_in_place
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


def _size(n: int) -> str:
    return f"{format_size(n)}B"


def collective_header(spec: pb.JobSpec) -> str:
    c = spec.collective
    placed = "in-place" if physically_in_place(c.op, c.in_place, c.algo) else "out-of-place"
    return _join(c.op or "collective", c.reduce_op if c.op in REDUCING_OPS else "",
                 f"root {c.root}" if c.op in ROOTED_OPS else "", c.dtype,
                 _sizes(c.sizes, c.min_bytes, c.max_bytes), placed, c.algo, "graph mode" if c.graph else "")


def p2p_header(spec: pb.JobSpec) -> str:
    p = spec.p2p
    return _join("p2p", p.mode or "blocking", "every pair" if p.pairwise else "rank 0 ↔ 1",
                 _sizes(p.sizes, p.min_bytes, p.max_bytes))


def gradient_average_header(spec: pb.JobSpec) -> str:
    g = spec.gradient_average
    return _join("gradient averaging", _size(g.size_bytes) if g.size_bytes else "")


def train_header(spec: pb.JobSpec) -> str:
    t = spec.train
    return _join("training", t.model or "linear", f"{t.steps} steps" if t.HasField("steps") else "",
                 f"batch {t.batch_size}" if t.HasField("batch_size") else "")


def algo_sweep_header(spec: pb.JobSpec) -> str:
    a = spec.algo_sweep
    return _join("algo sweep", ", ".join(a.algos) or "every algo", _sizes(a.sizes, a.min_bytes, a.max_bytes),
                 a.dtype, "graph mode" if a.graph else "eager")


def link_matrix_header(spec: pb.JobSpec) -> str:
    m = spec.link_matrix
    return _join("link matrix check", f"{_size(m.size_bytes)} ping-pong" if m.size_bytes else "",
                 f"{m.iters} round trips per link" if m.iters else "")


def gpu_check_header(spec: pb.JobSpec) -> str:
    g = spec.gpu_check
    return _join("GPU check", f"matrix product {g.matmul_n}² {g.dtype}".strip() if g.matmul_n else "",
                 f"memory copy {_size(g.copy_bytes)}" if g.copy_bytes else "")


def sdc_check_header(spec: pb.JobSpec) -> str:
    s = spec.sdc_check
    return _join("silent data corruption check", f"{s.rounds} rounds" if s.rounds else "",
                 f"seed {s.seed}" if s.seed else "")
