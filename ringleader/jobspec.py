"""JobSpec (wire form) validation and normalisation, shared by the CLI and the coordinator."""

from __future__ import annotations

import math

from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

DEVICE_TYPES = ("", "cuda", "cpu")


def collective(spec: pb.JobSpec, backend: str | None = None) -> specs.Collective:
    """The validated collective sweep of `spec` (field names in errors are the proto's)."""
    c = spec.collective
    try:
        return specs.validate_collective(
            op=c.op, dtype=c.dtype, reduce_op=c.reduce_op, sizes=list(c.sizes),
            min_bytes=c.min_bytes, max_bytes=c.max_bytes, factor=c.factor, iters=c.iters,
            warmup=c.warmup if c.HasField("warmup") else None, in_place=c.in_place,
            root=c.root, world_size=spec.world_size, backend=backend,
        )
    except InvalidSpec as exc:
        prefix = "" if exc.field == "world_size" else "collective."
        raise InvalidSpec(prefix + exc.field, exc.message) from None


def normalize(spec: pb.JobSpec) -> pb.JobSpec:
    """Validate `spec` and return a copy with every default written out."""
    if spec.world_size < 1:
        raise InvalidSpec("world_size", "must be at least 1")
    if spec.WhichOneof("kind") != "collective":
        raise InvalidSpec("kind", "set a job kind (collective)")
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
    c = collective(spec)
    out = pb.JobSpec()
    out.CopyFrom(spec)
    out.op_timeout_s = spec.op_timeout_s or specs.DEFAULT_OP_TIMEOUT_S
    oc = out.collective
    oc.dtype, oc.reduce_op, oc.iters, oc.warmup = c.dtype, c.reduce_op, c.iters, c.warmup
    if not oc.sizes:
        oc.min_bytes = oc.min_bytes or specs.DEFAULTS["min_bytes"]
        oc.max_bytes = oc.max_bytes or specs.DEFAULTS["max_bytes"]
        oc.factor = oc.factor or specs.DEFAULTS["factor"]
    return out


def needs_bytes(spec: pb.JobSpec) -> int:
    """Device bytes one rank needs for the largest size of the sweep."""
    c = collective(spec)
    return max((specs.bytes_needed(c.op, s, spec.world_size, c.in_place)
                for s in c.sizes_for(spec.world_size)), default=0)
