"""Admission: refuse at submit time what no connected worker could ever run.

Pure functions of the spec and the fleet's registrations, so they are tested without servers.
An empty fleet admits everything: the job waits for workers instead.
"""

from __future__ import annotations

from typing import Iterable

from ringleader import jobspec
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


def check(spec: pb.JobSpec, fleet: Iterable[wpb.Register]) -> None:
    """Raise InvalidSpec, naming the field, if no worker in `fleet` can run `spec`."""
    fleet = list(fleet)
    eligible = [w for w in fleet if not spec.placement.device_type or w.device.type == spec.placement.device_type]
    backends = sorted({w.backend for w in eligible})
    if spec.WhichOneof("kind") == "collective" and backends and not any(_supported(spec, b) for b in backends):
        jobspec.collective(spec, backend=backends[0])  # raises with the field and the backend
    need = jobspec.needs_bytes(spec)
    sized = [w for w in fleet if w.device.memory_bytes]
    if sized and need > max(w.device.memory_bytes for w in sized):
        biggest = max(sized, key=lambda w: w.device.memory_bytes)
        raise InvalidSpec(size_field(spec), (
            f"the largest size needs {specs.format_gib(need)} per device, the largest device "
            f"({biggest.device.name or biggest.device.type}) has {specs.format_gib(biggest.device.memory_bytes)}"))


def size_field(spec: pb.JobSpec) -> str:
    """The field a user changes to make the job smaller."""
    kind = spec.WhichOneof("kind")
    if kind == "gradient_average":
        return "gradient_average.size_bytes"
    explicit = getattr(spec, kind).sizes
    return f"{kind}.sizes" if explicit else f"{kind}.max_bytes"


def _supported(spec: pb.JobSpec, backend: str) -> bool:
    try:
        jobspec.collective(spec, backend=backend)
    except InvalidSpec:
        return False
    return True
