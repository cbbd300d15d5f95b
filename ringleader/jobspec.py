"""JobSpec (wire form) validation and normalisation, shared by the CLI and the coordinator.

Error fields are the proto's dotted paths ("collective.root", "train.batch_size").
"""

from __future__ import annotations

import contextlib
import math

from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

DEVICE_TYPES = ("", "cuda", "cpu")
KINDS = ("collective", "p2p", "gradient_average", "train")
P2P_MODES = ("blocking", "async")
MODELS = ("linear", "mlp")
TRAIN_DEFAULTS = dict(model="linear", steps=50, batch_size=64, lr=0.05)
GRADIENT_AVERAGE_DEFAULT_BYTES = 64 << 20
MAX_TRAIN_STEPS = 100_000


@contextlib.contextmanager
def _prefixed(kind: str):
    """Re-raise InvalidSpec from spec.py with the field under its job kind ("collective.op")."""
    try:
        yield
    except InvalidSpec as exc:
        if exc.field == "world_size" or "." in exc.field:
            raise
        raise InvalidSpec(f"{kind}.{exc.field}", exc.message) from None


def collective(spec: pb.JobSpec, backend: str | None = None) -> specs.Collective:
    """The validated collective sweep of `spec`."""
    c = spec.collective
    with _prefixed("collective"):
        return specs.validate_collective(
            op=c.op, dtype=c.dtype, reduce_op=c.reduce_op, sizes=list(c.sizes),
            min_bytes=c.min_bytes, max_bytes=c.max_bytes, factor=c.factor, iters=c.iters,
            warmup=c.warmup if c.HasField("warmup") else None, in_place=c.in_place,
            root=c.root, world_size=spec.world_size, backend=backend,
        )


def p2p_sizes(spec: pb.JobSpec) -> list[int]:
    p = spec.p2p
    with _prefixed("p2p"):
        return specs.resolve_sizes(list(p.sizes), p.min_bytes, p.max_bytes, p.factor)


def p2p_pairs(spec: pb.JobSpec) -> list[tuple[int, int]]:
    n = spec.world_size
    return [(i, j) for i in range(n) for j in range(n) if i != j] if spec.p2p.pairwise else [(0, 1)]


def normalize(spec: pb.JobSpec) -> pb.JobSpec:
    """Validate `spec` and return a copy with every default written out."""
    if spec.world_size < 1:
        raise InvalidSpec("world_size", "must be at least 1")
    kind = spec.WhichOneof("kind")
    if kind is None:
        raise InvalidSpec("kind", f"set a job kind: one of {', '.join(KINDS)}")
    p = spec.placement
    if p.device_type not in DEVICE_TYPES:
        raise InvalidSpec("placement.device_type", f"must be cuda or cpu, got {p.device_type!r}")
    if p.worker_ids:
        if len(set(p.worker_ids)) != len(p.worker_ids):
            raise InvalidSpec("placement.worker_ids", "lists a worker twice")
        if len(p.worker_ids) != spec.world_size:
            raise InvalidSpec("placement.worker_ids",
                              f"names {len(p.worker_ids)} workers but world_size is {spec.world_size}")
    if not math.isfinite(spec.op_timeout_s) or spec.op_timeout_s < 0:
        raise InvalidSpec("op_timeout_s", "must be a positive number of seconds")
    out = pb.JobSpec()
    out.CopyFrom(spec)
    out.op_timeout_s = spec.op_timeout_s or specs.DEFAULT_OP_TIMEOUT_S
    {"collective": _normalize_collective, "p2p": _normalize_p2p,
     "gradient_average": _normalize_gradient_average, "train": _normalize_train}[kind](out)
    return out


def _normalize_collective(out: pb.JobSpec) -> None:
    c = collective(out)
    oc = out.collective
    oc.dtype, oc.reduce_op, oc.iters, oc.warmup = c.dtype, c.reduce_op, c.iters, c.warmup
    _fill_sweep_defaults(oc)


def _fill_sweep_defaults(msg) -> None:
    """Write out min_bytes/max_bytes/factor of a sweep given by range (CollectiveSpec, P2PSpec)."""
    if not msg.sizes:
        msg.min_bytes = msg.min_bytes or specs.DEFAULTS["min_bytes"]
        msg.max_bytes = msg.max_bytes or specs.DEFAULTS["max_bytes"]
        msg.factor = msg.factor or specs.DEFAULTS["factor"]


def _normalize_p2p(out: pb.JobSpec) -> None:
    p = out.p2p
    if out.world_size < 2:
        field = "p2p.pairwise" if p.pairwise else "world_size"
        raise InvalidSpec(field, f"point-to-point needs at least 2 workers, world_size is {out.world_size}")
    p.mode = p.mode or "blocking"
    if p.mode not in P2P_MODES:
        raise InvalidSpec("p2p.mode", f"unknown mode {p.mode!r}; expected one of {', '.join(P2P_MODES)}")
    p2p_sizes(out)
    with _prefixed("p2p"):
        p.iters, p.warmup = specs.check_iters(p.iters, p.warmup if p.HasField("warmup") else None)
    _fill_sweep_defaults(p)


def _normalize_gradient_average(out: pb.JobSpec) -> None:
    g = out.gradient_average
    g.size_bytes = g.size_bytes or GRADIENT_AVERAGE_DEFAULT_BYTES
    if g.size_bytes < 4 or g.size_bytes % 4:
        raise InvalidSpec("gradient_average.size_bytes", f"must be a positive multiple of 4 (float32), got {g.size_bytes}")
    with _prefixed("gradient_average"):
        g.iters, g.warmup = specs.check_iters(g.iters, g.warmup if g.HasField("warmup") else None)


def _normalize_train(out: pb.JobSpec) -> None:
    t = out.train
    t.model = t.model or TRAIN_DEFAULTS["model"]
    if t.model not in MODELS:
        raise InvalidSpec("train.model", f"unknown model {t.model!r}; expected one of {', '.join(MODELS)}")
    for name in ("steps", "batch_size", "lr"):
        if not t.HasField(name):
            setattr(t, name, TRAIN_DEFAULTS[name])
    if not 1 <= t.steps <= MAX_TRAIN_STEPS:
        raise InvalidSpec("train.steps", f"must be between 1 and {MAX_TRAIN_STEPS}, got {t.steps}")
    if t.batch_size < 1:
        raise InvalidSpec("train.batch_size", f"must be at least 1, got {t.batch_size}")
    if not math.isfinite(t.lr) or t.lr <= 0:
        raise InvalidSpec("train.lr", f"must be a positive number, got {t.lr}")


def needs_bytes(spec: pb.JobSpec) -> int:
    """Device bytes one rank needs for the job's largest step (for placement and rejection)."""
    kind = spec.WhichOneof("kind")
    if kind == "collective":
        c = collective(spec)
        return max((specs.bytes_needed(c.op, s, spec.world_size, c.in_place)
                    for s in c.sizes_for(spec.world_size)), default=0)
    if kind == "p2p":
        return 2 * max(p2p_sizes(spec))  # a send and a receive buffer
    if kind == "gradient_average":
        return 2 * spec.gradient_average.size_bytes  # the gradient and its reference
    return 0  # train: a few MB of model and batch


def progress_total(spec: pb.JobSpec) -> int:
    """How many units (sizes, pairs x sizes, steps) the job's progress counts."""
    kind = spec.WhichOneof("kind")
    if kind == "collective":
        return len(collective(spec).sizes_for(spec.world_size))
    if kind == "p2p":
        return len(p2p_sizes(spec)) * len(p2p_pairs(spec))
    if kind == "train":
        return spec.train.steps
    return 1


def op_name(spec: pb.JobSpec) -> str:
    """What listings show as the job's op: the collective op, or the job kind."""
    kind = spec.WhichOneof("kind")
    return spec.collective.op if kind == "collective" else kind or ""
