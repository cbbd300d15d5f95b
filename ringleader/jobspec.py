"""JobSpec (wire form) validation: `normalize` checks a spec once and returns a ValidJob.

A ValidJob carries what the later steps need (the validated collective, effective sizes, device
bytes per rank, progress total, which backends can run it), so admission, scheduling, the start
of a job and the executor read it instead of checking again. Error fields are the proto's dotted
paths ("collective.root", "train.batch_size").
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

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
MAX_WORLD_SIZE = 65_536
MAX_TEXT = 256  # names, hosts, GPU models, worker ids: free text a user or worker sends
# A pairwise p2p job measures every ordered pair, n(n-1) of them: more ranks than this would
# take the coordinator minutes just to list the pairs (a request that hangs it).
MAX_PAIRWISE_RANKS = 256


@dataclass(frozen=True)
class ValidJob:
    """A checked job spec and what follows from it (see the module docstring)."""

    spec: pb.JobSpec  # a copy with every default written out
    kind: str
    op: str  # the collective op, or the job kind: what listings show and filter on
    collective: specs.Collective | None
    sizes: tuple[int, ...]  # collective: effective sizes on world_size ranks; p2p: its sizes
    pairs: tuple[tuple[int, int], ...]  # p2p: (src, dst) pairs in order
    needs_bytes: int  # device bytes one rank needs for the largest step
    progress_total: int  # units progress counts: sizes, pairs x sizes, steps

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    def refusal(self, backend: str) -> InvalidSpec | None:
        """Why `backend` cannot run this job (the field named), or None."""
        c = self.collective
        if c is None:
            return None
        why = specs.backend_refusal(backend, op=c.op, dtype=c.dtype, reduce_op=c.reduce_op)
        return InvalidSpec(f"collective.{why.field}", why.message) if why else None

    def runs_on(self, backend: str) -> bool:
        return self.refusal(backend) is None


@contextlib.contextmanager
def _prefixed(kind: str):
    """Re-raise InvalidSpec from spec.py with the field under its job kind ("collective.op")."""
    try:
        yield
    except InvalidSpec as exc:
        if exc.field == "world_size" or "." in exc.field:
            raise
        raise InvalidSpec(f"{kind}.{exc.field}", exc.message) from None


def normalize(spec: pb.JobSpec) -> ValidJob:
    """Validate `spec`, naming the first bad field, and return it checked with defaults filled."""
    if not 1 <= spec.world_size <= MAX_WORLD_SIZE:
        raise InvalidSpec("world_size", f"must be between 1 and {MAX_WORLD_SIZE}, got {spec.world_size}")
    kind = spec.WhichOneof("kind")
    if kind is None:
        raise InvalidSpec("kind", f"set a job kind: one of {', '.join(KINDS)}")
    _check_text("name", spec.name)
    _check_placement(spec)
    if not math.isfinite(spec.op_timeout_s) or spec.op_timeout_s < 0:
        raise InvalidSpec("op_timeout_s", "must be a positive number of seconds")
    out = pb.JobSpec()
    out.CopyFrom(spec)
    out.op_timeout_s = spec.op_timeout_s or specs.DEFAULT_OP_TIMEOUT_S
    return _NORMALIZERS[kind](out)


def _check_text(field: str, value: str) -> None:
    if len(value) > MAX_TEXT:
        raise InvalidSpec(field, f"at most {MAX_TEXT} characters, got {len(value)}")


def _check_placement(spec: pb.JobSpec) -> None:
    p = spec.placement
    if p.device_type not in DEVICE_TYPES:
        raise InvalidSpec("placement.device_type", f"must be cuda or cpu, got {p.device_type[:MAX_TEXT]!r}")
    _check_text("placement.host", p.host)
    _check_text("placement.gpu_model", p.gpu_model)
    if p.worker_ids:
        if len(p.worker_ids) != spec.world_size:
            raise InvalidSpec("placement.worker_ids",
                              f"names {len(p.worker_ids)} workers but world_size is {spec.world_size}")
        if len(set(p.worker_ids)) != len(p.worker_ids):
            raise InvalidSpec("placement.worker_ids", "lists a worker twice")
        for w in p.worker_ids:
            _check_text("placement.worker_ids", w)


def _valid(out: pb.JobSpec, *, collective=None, sizes=(), pairs=(), needs_bytes=0, total=1) -> ValidJob:
    kind = out.WhichOneof("kind")
    return ValidJob(spec=out, kind=kind, op=collective.op if collective else kind, collective=collective,
                    sizes=tuple(sizes), pairs=tuple(pairs), needs_bytes=needs_bytes, progress_total=total)


def _normalize_collective(out: pb.JobSpec) -> ValidJob:
    oc = out.collective
    with _prefixed("collective"):
        c = specs.validate_collective(
            op=oc.op, dtype=oc.dtype, reduce_op=oc.reduce_op, sizes=list(oc.sizes),
            min_bytes=oc.min_bytes, max_bytes=oc.max_bytes, factor=oc.factor, iters=oc.iters,
            warmup=oc.warmup if oc.HasField("warmup") else None, in_place=oc.in_place,
            root=oc.root, world_size=out.world_size)
    oc.dtype, oc.reduce_op, oc.iters, oc.warmup = c.dtype, c.reduce_op, c.iters, c.warmup
    _fill_sweep_defaults(oc)
    sizes = c.sizes_for(out.world_size)
    need = max((specs.bytes_needed(c.op, s, out.world_size, c.in_place) for s in sizes), default=0)
    return _valid(out, collective=c, sizes=sizes, needs_bytes=need, total=len(sizes))


def _fill_sweep_defaults(msg) -> None:
    """Write out min_bytes/max_bytes/factor of a sweep given by range (CollectiveSpec, P2PSpec)."""
    if not msg.sizes:
        msg.min_bytes = msg.min_bytes or specs.DEFAULTS["min_bytes"]
        msg.max_bytes = msg.max_bytes or specs.DEFAULTS["max_bytes"]
        msg.factor = msg.factor or specs.DEFAULTS["factor"]


def _normalize_p2p(out: pb.JobSpec) -> ValidJob:
    p = out.p2p
    if out.world_size < 2:
        field = "p2p.pairwise" if p.pairwise else "world_size"
        raise InvalidSpec(field, f"point-to-point needs at least 2 workers, world_size is {out.world_size}")
    p.mode = p.mode or "blocking"
    if p.mode not in P2P_MODES:
        raise InvalidSpec("p2p.mode", f"unknown mode {p.mode[:MAX_TEXT]!r}; expected one of {', '.join(P2P_MODES)}")
    with _prefixed("p2p"):
        sizes = specs.resolve_sizes(list(p.sizes), p.min_bytes, p.max_bytes, p.factor)
        p.iters, p.warmup = specs.check_iters(p.iters, p.warmup if p.HasField("warmup") else None)
    _fill_sweep_defaults(p)
    n = out.world_size
    if p.pairwise and n > MAX_PAIRWISE_RANKS:
        raise InvalidSpec("p2p.pairwise", f"every ordered pair of {n} ranks is {n * (n - 1)} measurements; "
                                          f"pairwise takes at most {MAX_PAIRWISE_RANKS} ranks")
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if p.pairwise else [(0, 1)]
    # A send and a receive buffer of the largest size.
    return _valid(out, sizes=sizes, pairs=pairs, needs_bytes=2 * max(sizes), total=len(sizes) * len(pairs))


def _normalize_gradient_average(out: pb.JobSpec) -> ValidJob:
    g = out.gradient_average
    g.size_bytes = g.size_bytes or GRADIENT_AVERAGE_DEFAULT_BYTES
    if g.size_bytes < 4 or g.size_bytes % 4:
        raise InvalidSpec("gradient_average.size_bytes", f"must be a positive multiple of 4 (float32), got {g.size_bytes}")
    with _prefixed("gradient_average"):
        g.iters, g.warmup = specs.check_iters(g.iters, g.warmup if g.HasField("warmup") else None)
    return _valid(out, needs_bytes=2 * g.size_bytes)  # the gradient and its reference


def _normalize_train(out: pb.JobSpec) -> ValidJob:
    t = out.train
    t.model = t.model or TRAIN_DEFAULTS["model"]
    if t.model not in MODELS:
        raise InvalidSpec("train.model", f"unknown model {t.model[:MAX_TEXT]!r}; expected one of {', '.join(MODELS)}")
    for name in ("steps", "batch_size", "lr"):
        if not t.HasField(name):
            setattr(t, name, TRAIN_DEFAULTS[name])
    if not 1 <= t.steps <= MAX_TRAIN_STEPS:
        raise InvalidSpec("train.steps", f"must be between 1 and {MAX_TRAIN_STEPS}, got {t.steps}")
    if t.batch_size < 1:
        raise InvalidSpec("train.batch_size", f"must be at least 1, got {t.batch_size}")
    if not math.isfinite(t.lr) or t.lr <= 0:
        raise InvalidSpec("train.lr", f"must be a positive number, got {t.lr}")
    return _valid(out, total=t.steps)  # a few MB of model and batch: no memory check


_NORMALIZERS = {"collective": _normalize_collective, "p2p": _normalize_p2p,
                "gradient_average": _normalize_gradient_average, "train": _normalize_train}


def size_field(v: ValidJob) -> str:
    """The field a user changes to make the job smaller."""
    if v.kind == "gradient_average":
        return "gradient_average.size_bytes"
    explicit = getattr(v.spec, v.kind).sizes
    return f"{v.kind}.sizes" if explicit else f"{v.kind}.max_bytes"


def op_name(spec: pb.JobSpec) -> str:
    """What listings show as the job's op: the collective op, or the job kind (no validation)."""
    kind = spec.WhichOneof("kind")
    return spec.collective.op if kind == "collective" else kind or ""
