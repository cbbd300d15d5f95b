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

from ringleader import algos, kinds
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

DEVICE_TYPES = ("", "cuda", "cpu")
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
DEFAULT_RENDEZVOUS_TIMEOUT_S = 30.0  # forming a group: within the store's and NCCL's usual times
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

    @classmethod
    def from_normalized(cls, spec: pb.JobSpec) -> "ValidJob":
        """The ValidJob of a spec `normalize` already returned (an Assignment's): derived by the
        kind's view, with no check repeated (what the executor does)."""
        if not spec.op_timeout_s:  # normalize writes every default out, this one included
            raise InvalidSpec("spec", "not normalized: the coordinator sends specs with every default written out")
        return kinds.get(spec.WhichOneof("kind") or "").resolve("view")(spec)

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
def prefixed(kind: str):
    """Re-raise InvalidSpec from spec.py with the field under its job kind ("collective.op")."""
    try:
        yield
    except InvalidSpec as exc:
        if exc.field == "world_size" or "." in exc.field:
            raise
        raise InvalidSpec(f"{kind}.{exc.field}", exc.message) from None


def normalize(spec: pb.JobSpec) -> ValidJob:
    """Validate `spec`, naming the first bad field, and return it checked with defaults filled:
    the common fields here, then the kind's own check and view (the table, ringleader/kinds.py)."""
    if not 1 <= spec.world_size <= MAX_WORLD_SIZE:
        raise InvalidSpec("world_size", f"must be between 1 and {MAX_WORLD_SIZE}, got {spec.world_size}")
    name = spec.WhichOneof("kind")
    if name is None:
        raise InvalidSpec("kind", f"set a job kind: one of {', '.join(kinds.names())}")
    kind = kinds.get(name)  # a oneof member with no entry yet (a kind being built) is refused
    if not -MAX_PRIORITY <= spec.priority <= MAX_PRIORITY:
        raise InvalidSpec("priority", f"must be between -{MAX_PRIORITY} and {MAX_PRIORITY}, got {spec.priority}")
    check_text("name", spec.name)
    _check_placement(spec)
    if (size := spec.ByteSize()) > MAX_SPEC_BYTES:  # before any per-element work on a huge list
        raise InvalidSpec(_largest_field(spec), f"the spec is {size} bytes serialized, at most {MAX_SPEC_BYTES}: "
                          "make this list shorter (or place by host or gpu_model)")
    for field in ("op_timeout_s", "rendezvous_timeout_s", "queue_timeout_s"):
        if not math.isfinite(value := getattr(spec, field)) or not 0 <= value <= MAX_OP_TIMEOUT_S:
            raise InvalidSpec(field, f"must be a number of seconds between 0 (the default) and {MAX_OP_TIMEOUT_S:.0f}")
    out = pb.JobSpec()
    out.CopyFrom(spec)
    out.op_timeout_s = spec.op_timeout_s or specs.DEFAULT_OP_TIMEOUT_S
    out.rendezvous_timeout_s = _rendezvous_timeout(spec.rendezvous_timeout_s, out.op_timeout_s)
    kind.resolve("check")(out)
    return kind.resolve("view")(out)


def _largest_field(spec: pb.JobSpec) -> str:
    """The dotted name of the field that makes an oversized spec large: the worker ids, or a
    list of its kind's message (every string is bounded, so only lists add up)."""
    kind = spec.WhichOneof("kind")
    msg = getattr(spec, kind)
    weights = {"placement.worker_ids": spec.placement.ByteSize()}
    for field, _ in msg.ListFields():
        rest = type(msg)()
        rest.CopyFrom(msg)
        rest.ClearField(field.name)
        weights[f"{kind}.{field.name}"] = msg.ByteSize() - rest.ByteSize()
    return max(weights, key=weights.__getitem__)


def _rendezvous_timeout(seconds: float, op_timeout_s: float) -> float:
    """Forming a group has its own deadline, within the op deadline (0: the default, capped by it);
    the executors' init_process_group gets it too."""
    if seconds > op_timeout_s:
        raise InvalidSpec("rendezvous_timeout_s", f"must be at most op_timeout_s ({op_timeout_s:g} s), got {seconds:g} "
                          f"(0: the default, {DEFAULT_RENDEZVOUS_TIMEOUT_S:g} s)")
    return seconds or min(DEFAULT_RENDEZVOUS_TIMEOUT_S, op_timeout_s)


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


def valid(out: pb.JobSpec, *, collective=None, sizes=(), pairs=(), needs_bytes=0, total=1) -> ValidJob:
    """The ValidJob of a checked spec, from what its kind's view derived."""
    kind = out.WhichOneof("kind")
    return ValidJob(spec=out, kind=kind, op=collective.op if collective else kind, collective=collective,
                    sizes=tuple(sizes), pairs=tuple(pairs), needs_bytes=needs_bytes, progress_total=total)


def fill_sweep_defaults(msg) -> None:
    """Write out min_bytes/max_bytes/factor of a sweep given by range (CollectiveSpec, P2PSpec, ...)."""
    if not msg.sizes:
        msg.min_bytes = msg.min_bytes or specs.DEFAULTS["min_bytes"]
        msg.max_bytes = msg.max_bytes or specs.DEFAULTS["max_bytes"]
        msg.factor = msg.factor or specs.DEFAULTS["factor"]


def sweep_of(msg) -> list[int]:
    """The requested sizes of a checked sweep (explicit, or its range with defaults written out)."""
    return list(msg.sizes) or specs.sweep_sizes(msg.min_bytes, msg.max_bytes, msg.factor)


def size_field(v: ValidJob) -> str:
    """The field a user changes to make the job smaller (every kind has one: the check kinds'
    specs have no `sizes`)."""
    msg = getattr(v.spec, v.kind)
    fields = msg.DESCRIPTOR.fields_by_name
    if "sizes" in fields:
        return f"{v.kind}.sizes" if msg.sizes else f"{v.kind}.max_bytes"
    if v.kind == "gpu_check":  # the larger of its matrices (3 n^2) and its copy (2 x copy_bytes)
        elem = 4 if msg.dtype == "float32" else 2
        return "gpu_check.matmul_n" if msg.matmul_n and 3 * msg.matmul_n ** 2 * elem > 2 * msg.copy_bytes \
            else "gpu_check.copy_bytes"
    if "size_bytes" in fields:
        return f"{v.kind}.size_bytes"
    return v.kind  # a fixed size per rank (sdc_check: 4 MiB): the kind itself does not fit


def op_name(spec: pb.JobSpec) -> str:
    """What listings show as the job's op: the collective op, or the job kind (no validation)."""
    kind = spec.WhichOneof("kind")
    return spec.collective.op if kind == "collective" else kind or ""
