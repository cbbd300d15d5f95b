"""JobSpec (wire form) validation: `normalize` checks a spec once and returns a ValidJob.

A ValidJob carries what the later steps need (the validated collective, effective sizes, device
bytes per rank, progress total, which backends can run it), so admission, scheduling, the start
of a job and the executor read it instead of checking again. Error fields are the proto's dotted
paths ("collective.root", "train.batch_size").
"""

from __future__ import annotations

import contextlib
import importlib
import math
from dataclasses import dataclass

from ringleader import algos
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

DEVICE_TYPES = ("", "cuda", "cpu")
KINDS = ("collective", "p2p", "gradient_average", "train", "algo_sweep")
P2P_MODES = ("blocking", "async")
MODELS = ("linear", "mlp")
TRAIN_DEFAULTS = dict(model="linear", steps=50, batch_size=64, lr=0.05)
GRADIENT_AVERAGE_DEFAULT_BYTES = 64 << 20
MAX_TRAIN_STEPS = 100_000
MAX_WORLD_SIZE = 65_536
MAX_TEXT = 256  # names, hosts, GPU models, worker ids: free text a user or worker sends
# A bound on priority bounds how long aging (one level per minute) takes to overtake: 33 hours.
MAX_PRIORITY = 1000
MAX_OP_TIMEOUT_S = 7 * 86400.0
MAX_BATCH_SIZE = 1 << 20
# The spec travels to every rank in its Assignment and is stored with the job; only a long list
# of worker ids can make it this large.
MAX_SPEC_BYTES = 64 << 10
# A pairwise p2p job reports world_size * (world_size - 1) * sizes rows in one message, which
# must stay well under the 4 MiB message limit (a row is about 60 bytes).
MAX_P2P_ROWS = 16_384
MAX_REQUEST_ID = 128


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
        if c is not None:
            why = specs.backend_refusal(backend, op=c.op, dtype=c.dtype, reduce_op=c.reduce_op, graph=c.graph,
                                        algo=c.algo)
            return InvalidSpec(f"collective.{why.field}", why.message) if why else None
        if self.kind == "algo_sweep":
            s = self.spec.algo_sweep
            for algo in s.algos or [""]:
                why = specs.backend_refusal(backend, op="all_reduce", dtype=s.dtype, reduce_op="sum",
                                            graph=s.graph, algo=algo)
                if why:
                    return InvalidSpec(f"algo_sweep.{'algos' if why.field == 'algo' else why.field}", why.message)
        return None

    def runs_on(self, backend: str) -> bool:
        return self.refusal(backend) is None

    @property
    def flavor(self) -> str:
        """The communicator settings its process group needs ("" for the defaults)."""
        return algos.flavor(self.collective.algo) if self.collective else ""


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
    if not -MAX_PRIORITY <= spec.priority <= MAX_PRIORITY:
        raise InvalidSpec("priority", f"must be between -{MAX_PRIORITY} and {MAX_PRIORITY}, got {spec.priority}")
    check_text("name", spec.name)
    _check_placement(spec)
    if (size := spec.ByteSize()) > MAX_SPEC_BYTES:  # every string is bounded: only worker ids add up
        raise InvalidSpec("placement.worker_ids", f"the spec is {size} bytes serialized, at most {MAX_SPEC_BYTES}: "
                          "name fewer workers, or place by host or gpu_model")
    if not math.isfinite(spec.op_timeout_s) or not 0 <= spec.op_timeout_s <= MAX_OP_TIMEOUT_S:
        raise InvalidSpec("op_timeout_s", f"must be a number of seconds between 0 (the default) and {MAX_OP_TIMEOUT_S:.0f}")
    out = pb.JobSpec()
    out.CopyFrom(spec)
    out.op_timeout_s = spec.op_timeout_s or specs.DEFAULT_OP_TIMEOUT_S
    # The fleet checks' normalizers by name: ringleader/checks.py builds on ValidJob (no cycle).
    normalizer = _NORMALIZERS.get(kind) or importlib.import_module("ringleader.checks").NORMALIZERS[kind]
    return normalizer(out)


def check_text(field: str, value: str) -> None:
    """Free text a spec or request carries (a name, host, job id, reason, filter): at most MAX_TEXT
    characters."""
    if len(value) > MAX_TEXT:
        raise InvalidSpec(field, f"at most {MAX_TEXT} characters, got {len(value)}")


def check_request_id(request_id: str) -> None:
    """An idempotency key: 1-MAX_REQUEST_ID printable characters (empty means none)."""
    if len(request_id) > MAX_REQUEST_ID or not request_id.isprintable():
        raise InvalidSpec("request_id", f"at most {MAX_REQUEST_ID} printable characters, got {len(request_id)}")


def _check_placement(spec: pb.JobSpec) -> None:
    p = spec.placement
    if p.device_type not in DEVICE_TYPES:
        raise InvalidSpec("placement.device_type", f"must be cuda or cpu, got {p.device_type[:MAX_TEXT]!r}")
    check_text("placement.host", p.host)
    check_text("placement.gpu_model", p.gpu_model)
    if p.worker_ids:
        if len(p.worker_ids) != spec.world_size:
            raise InvalidSpec("placement.worker_ids",
                              f"names {len(p.worker_ids)} workers but world_size is {spec.world_size}")
        if len(set(p.worker_ids)) != len(p.worker_ids):
            raise InvalidSpec("placement.worker_ids", "lists a worker twice")
        for w in p.worker_ids:
            check_text("placement.worker_ids", w)


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
            root=oc.root, world_size=out.world_size, graph=oc.graph, algo=oc.algo)
    oc.dtype, oc.reduce_op, oc.iters, oc.warmup, oc.algo = c.dtype, c.reduce_op, c.iters, c.warmup, c.algo
    _fill_sweep_defaults(oc)
    sizes = c.sizes_for(out.world_size)
    need = max((specs.bytes_needed(c.op, s, out.world_size, c.in_place, c.algo) for s in sizes), default=0)
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
    if p.pairwise and n * (n - 1) * len(sizes) > MAX_P2P_ROWS:
        raise InvalidSpec("p2p.pairwise", f"{n} ranks x {n - 1} peers x {len(sizes)} sizes is "
                          f"{n * (n - 1) * len(sizes)} measurements, at most {MAX_P2P_ROWS}")
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j] if p.pairwise else [(0, 1)]
    # A send and a receive buffer of the largest size.
    return _valid(out, sizes=sizes, pairs=pairs, needs_bytes=2 * max(sizes), total=len(sizes) * len(pairs))


def _normalize_gradient_average(out: pb.JobSpec) -> ValidJob:
    g = out.gradient_average
    g.size_bytes = g.size_bytes or GRADIENT_AVERAGE_DEFAULT_BYTES
    if not 4 <= g.size_bytes <= specs.MAX_BYTES or g.size_bytes % 4:
        raise InvalidSpec("gradient_average.size_bytes", f"must be a positive multiple of 4 (float32) up to "
                          f"{specs.format_size(specs.MAX_BYTES)}, got {g.size_bytes}")
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
    if not 1 <= t.batch_size <= MAX_BATCH_SIZE:
        raise InvalidSpec("train.batch_size", f"must be between 1 and {MAX_BATCH_SIZE}, got {t.batch_size}")
    if not math.isfinite(t.lr) or t.lr <= 0:
        raise InvalidSpec("train.lr", f"must be a positive number, got {t.lr}")
    return _valid(out, total=t.steps)  # a few MB of model and batch: no memory check


def _normalize_algo_sweep(out: pb.JobSpec) -> ValidJob:
    a = out.algo_sweep
    a.dtype = a.dtype or specs.DEFAULTS["dtype"]
    if a.dtype not in algos.SYMM_DTYPES:
        raise InvalidSpec("algo_sweep.dtype", f"must be one of {', '.join(algos.SYMM_DTYPES)}, got {a.dtype[:MAX_TEXT]!r}")
    chosen = [algos.parse_algo(x, "algo_sweep.algos") for x in a.algos]
    if len(set(chosen)) != len(chosen):
        raise InvalidSpec("algo_sweep.algos", "lists an algo twice")
    for algo in chosen:
        algos.check_algo(algo, op="all_reduce", dtype=a.dtype, reduce_op="sum", field="algo_sweep.algos")
    if len({algos.algo_backend(x) or "any" for x in chosen} - {"any"}) > 1:
        raise InvalidSpec("algo_sweep.algos", "mixes gloo and nccl implementations: no gang runs both")
    del a.algos[:]
    a.algos.extend(chosen)
    with _prefixed("algo_sweep"):
        requested = specs.resolve_sizes(list(a.sizes), a.min_bytes, a.max_bytes, a.factor)
        a.iters, a.warmup = specs.check_iters(a.iters, a.warmup if a.HasField("warmup") else None, auto=True)
    _fill_sweep_defaults(a)
    sizes = []
    for size in requested:
        s = specs.effective_size("all_reduce", size, a.dtype, out.world_size)
        if s not in sizes:
            sizes.append(s)
    # The op's buffers and check, plus one symmetric buffer of the largest size it runs.
    need = specs.bytes_needed("all_reduce", max(sizes), out.world_size, False) + min(max(sizes), algos.SYMM_MAX_BYTES)
    return _valid(out, sizes=sizes, needs_bytes=need, total=len(sizes))


_NORMALIZERS = {"collective": _normalize_collective, "p2p": _normalize_p2p,
                "gradient_average": _normalize_gradient_average, "train": _normalize_train,
                "algo_sweep": _normalize_algo_sweep}


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
