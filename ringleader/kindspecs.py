"""Each built-in job kind's spec: `check_KIND` fills its defaults and refuses what is wrong,
naming the proto's dotted field ("p2p.mode"); `view_KIND` derives the ValidJob of a spec that
passed, without checking again (what the executor calls). The table in ringleader/kinds.py names
them; jobspec.normalize runs the common checks, then the kind's check, then its view.
"""

from __future__ import annotations

import math

from ringleader import algos
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.jobspec import (
    GRADIENT_AVERAGE_DEFAULT_BYTES, MAX_BATCH_SIZE, MAX_P2P_ROWS, MAX_TEXT, MAX_TRAIN_STEPS, MODELS, P2P_MODES,
    TRAIN_DEFAULTS, ValidJob, fill_sweep_defaults, prefixed, sweep_of, valid,
)
from ringleader.v1 import jobs_pb2 as pb

# ---- collective ----------------------------------------------------------------------------


def check_collective(out: pb.JobSpec) -> None:
    oc = out.collective
    with prefixed("collective"):
        c = specs.validate_collective(
            op=oc.op, dtype=oc.dtype, reduce_op=oc.reduce_op, sizes=list(oc.sizes),
            min_bytes=oc.min_bytes, max_bytes=oc.max_bytes, factor=oc.factor, iters=oc.iters,
            warmup=oc.warmup if oc.HasField("warmup") else None, in_place=oc.in_place,
            root=oc.root, world_size=out.world_size, graph=oc.graph, algo=oc.algo)
    oc.dtype, oc.reduce_op, oc.iters, oc.warmup, oc.algo = c.dtype, c.reduce_op, c.iters, c.warmup, c.algo
    fill_sweep_defaults(oc)


def view_collective(out: pb.JobSpec) -> ValidJob:
    oc = out.collective
    c = specs.Collective(oc.op, oc.dtype, oc.reduce_op, (0,) if oc.op == "barrier" else tuple(sweep_of(oc)), oc.iters,
                         oc.warmup, oc.in_place, oc.root, oc.graph, oc.algo)
    sizes = c.sizes_for(out.world_size)
    need = max(specs.bytes_needed(c.op, s, out.world_size, c.in_place, c.algo) for s in sizes)  # >= 1 size
    return valid(out, collective=c, sizes=sizes, needs_bytes=need, total=len(sizes))


# ---- p2p -----------------------------------------------------------------------------------


def check_p2p(out: pb.JobSpec) -> None:
    p = out.p2p
    if out.world_size < 2:
        field = "p2p.pairwise" if p.pairwise else "world_size"
        raise InvalidSpec(field, f"point-to-point needs at least 2 workers, world_size is {out.world_size}")
    p.mode = p.mode or "blocking"
    if p.mode not in P2P_MODES:
        raise InvalidSpec("p2p.mode", f"unknown mode {p.mode[:MAX_TEXT]!r}; expected one of {', '.join(P2P_MODES)}")
    with prefixed("p2p"):
        sizes = specs.resolve_sizes(list(p.sizes), p.min_bytes, p.max_bytes, p.factor)
        p.iters, p.warmup = specs.check_iters(p.iters, p.warmup if p.HasField("warmup") else None)
    fill_sweep_defaults(p)
    n = out.world_size
    if p.pairwise and n * (n - 1) * len(sizes) > MAX_P2P_ROWS:
        raise InvalidSpec("p2p.pairwise", f"{n} ranks x {n - 1} peers x {len(sizes)} sizes is "
                          f"{n * (n - 1) * len(sizes)} measurements, at most {MAX_P2P_ROWS}")


def view_p2p(out: pb.JobSpec) -> ValidJob:
    p, n = out.p2p, out.world_size
    sizes = sweep_of(p)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if p.pairwise else [(0, 1)]
    # A send and a receive buffer of the largest size.
    return valid(out, sizes=sizes, pairs=pairs, needs_bytes=2 * max(sizes), total=len(sizes) * len(pairs))


# ---- gradient_average ----------------------------------------------------------------------


def check_gradient_average(out: pb.JobSpec) -> None:
    g = out.gradient_average
    g.size_bytes = g.size_bytes or GRADIENT_AVERAGE_DEFAULT_BYTES
    if not 4 <= g.size_bytes <= specs.MAX_BYTES or g.size_bytes % 4:
        raise InvalidSpec("gradient_average.size_bytes", f"must be a positive multiple of 4 (float32) up to "
                          f"{specs.format_size(specs.MAX_BYTES)}, got {g.size_bytes}")
    with prefixed("gradient_average"):
        g.iters, g.warmup = specs.check_iters(g.iters, g.warmup if g.HasField("warmup") else None)


def view_gradient_average(out: pb.JobSpec) -> ValidJob:
    return valid(out, needs_bytes=2 * out.gradient_average.size_bytes)  # the gradient and its reference


# ---- train ---------------------------------------------------------------------------------


def check_train(out: pb.JobSpec) -> None:
    t = out.train
    t.model = t.model or TRAIN_DEFAULTS["model"]
    if t.model not in MODELS:
        raise InvalidSpec("train.model", f"unknown model {t.model[:MAX_TEXT]!r}; expected one of {', '.join(MODELS)}")
    for name in ("steps", "batch_size", "lr"):
        if not t.HasField(name):
            setattr(t, name, TRAIN_DEFAULTS[name])
    if not 1 <= t.steps <= MAX_TRAIN_STEPS:
        raise InvalidSpec("train.steps", f"must be between 1 and {MAX_TRAIN_STEPS}, got {t.steps}")
    if not 1 <= t.batch_size <= MAX_BATCH_SIZE:
        raise InvalidSpec("train.batch_size", f"must be between 1 and {MAX_BATCH_SIZE}, got {t.batch_size}")
    if not math.isfinite(t.lr) or t.lr <= 0:
        raise InvalidSpec("train.lr", f"must be a positive number, got {t.lr}")


def view_train(out: pb.JobSpec) -> ValidJob:
    return valid(out, total=out.train.steps)  # a few MB of model and batch: no memory check


# ---- algo_sweep ----------------------------------------------------------------------------


def check_algo_sweep(out: pb.JobSpec) -> None:
    a = out.algo_sweep
    a.dtype = a.dtype or specs.DEFAULTS["dtype"]
    if a.dtype not in algos.SYMM_DTYPES:
        raise InvalidSpec("algo_sweep.dtype", f"must be one of {', '.join(algos.SYMM_DTYPES)}, got {a.dtype[:MAX_TEXT]!r}")
    chosen = [algos.parse_algo(x, "algo_sweep.algos") for x in a.algos]
    if len(set(chosen)) != len(chosen):
        raise InvalidSpec("algo_sweep.algos", "lists an algo twice")
    # (algos.check_algo has nothing to refuse here: all_reduce, sum, and a dtype symm reduces.)
    if len({algos.algo_backend(x) or "any" for x in chosen} - {"any"}) > 1:
        raise InvalidSpec("algo_sweep.algos", "mixes gloo and nccl implementations: no gang runs both")
    del a.algos[:]
    a.algos.extend(chosen)
    with prefixed("algo_sweep"):
        specs.resolve_sizes(list(a.sizes), a.min_bytes, a.max_bytes, a.factor)
        a.iters, a.warmup = specs.check_iters(a.iters, a.warmup if a.HasField("warmup") else None, auto=True)
    fill_sweep_defaults(a)


def view_algo_sweep(out: pb.JobSpec) -> ValidJob:
    a = out.algo_sweep
    sizes: list[int] = []
    for size in sweep_of(a):
        s = specs.effective_size("all_reduce", size, a.dtype, out.world_size)
        if s not in sizes:
            sizes.append(s)
    # The op's buffers and check, plus one symmetric buffer of the largest size it runs.
    need = specs.bytes_needed("all_reduce", max(sizes), out.world_size, False) + min(max(sizes), algos.SYMM_MAX_BYTES)
    return valid(out, sizes=sizes, needs_bytes=need, total=len(sizes))
