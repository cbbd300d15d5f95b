"""Admission: refuse at the door what can never run, and what a worker may not claim or report.

Pure functions of the checked spec (or a registration) and the fleet, tested without servers.
An empty fleet admits every job: it waits for workers instead.
"""

from __future__ import annotations

import re
from typing import Iterable

from ringleader import jobspec
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.jobspec import MAX_TEXT, ValidJob
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

# Worker ids, hosts and group keys reach logs, the UI and metric labels: a conservative alphabet.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/\[\]-]*$")
DEVICE_TYPES = ("cuda", "cpu")


def check(valid: ValidJob, fleet: Iterable[wpb.Register]) -> None:
    """Raise InvalidSpec, naming the field, if no worker in `fleet` can run the job."""
    fleet = list(fleet)
    device_type = valid.spec.placement.device_type
    eligible = [w for w in fleet if not device_type or w.device.type == device_type]
    backends = sorted({w.backend for w in eligible})
    if backends and not any(valid.runs_on(b) for b in backends):
        raise valid.refusal(backends[0])
    sized = [w for w in eligible if w.device.memory_bytes]  # a CPU's memory does not make room on a GPU
    if sized and valid.needs_bytes > max(w.device.memory_bytes for w in sized):
        biggest = max(sized, key=lambda w: w.device.memory_bytes)
        raise InvalidSpec(jobspec.size_field(valid), (
            f"the largest size needs {specs.format_gib(valid.needs_bytes)} per device, the largest device "
            f"({biggest.device.name or biggest.device.type}) has {specs.format_gib(biggest.device.memory_bytes)}"))


def check_registration(reg: wpb.Register) -> None:
    """Raise InvalidSpec naming the field if a worker's registration is malformed."""
    for name in ("worker_id", "host", "address"):
        value = getattr(reg, name)
        if not value or len(value) > MAX_TEXT or not _NAME.match(value):
            raise InvalidSpec(f"register.{name}", f"must be 1-{MAX_TEXT} characters of letters, digits "
                              f"and ._:@/[]- starting with a letter or digit, got {value[:64]!r}")
    if reg.backend not in specs.BACKENDS:
        raise InvalidSpec("register.backend", f"must be one of {', '.join(specs.BACKENDS)}")
    if reg.device.type not in DEVICE_TYPES:
        raise InvalidSpec("register.device.type", f"must be one of {', '.join(DEVICE_TYPES)}")
    for name, value in (("device.name", reg.device.name), ("device.uuid", reg.device.uuid),
                        ("version", reg.version), ("warm_group", reg.warm_group),
                        ("running_job_id", reg.running_job_id)):
        if len(value) > MAX_TEXT or not value.isprintable():
            raise InvalidSpec(f"register.{name}", f"at most {MAX_TEXT} printable characters")
    check_fingerprint(reg.fingerprint)


# A fingerprint's bounds (worker/fingerprint.py cuts to them before sending).
FP_ENTRIES, FP_KEY, FP_VALUE = 64, 64, 256
_FP_KEY = re.compile(r"^[A-Za-z0-9_.]+$")


def check_fingerprint(fp: pb.ConfigFingerprint) -> None:
    """Raise InvalidSpec naming the entry if a worker's fingerprint is out of bounds: its keys and
    values reach listings, the UI and the REST API."""
    for part in ("software", "topology", "settings"):
        entries = getattr(fp, part)
        if len(entries) > FP_ENTRIES:
            raise InvalidSpec(f"register.fingerprint.{part}", f"at most {FP_ENTRIES} entries, got {len(entries)}")
        for key, value in entries.items():
            if len(key) > FP_KEY or not _FP_KEY.match(key):
                raise InvalidSpec(f"register.fingerprint.{part}",
                                  f"keys must be 1-{FP_KEY} letters, digits, '_' or '.', got {key[:64]!r}")
            if len(value) > FP_VALUE or not value.isprintable():
                raise InvalidSpec(f"register.fingerprint.{part}[{key}]", f"at most {FP_VALUE} printable characters")


def result_refusal(valid: ValidJob, row: pb.SizeResult) -> str:
    """Why a result row reported for a job is not one of that job's ("" if it is one). Its op,
    dtype and world size become metric labels and its strings reach the store and the UI, so
    they must be the job's own; its size must be one the job measures."""
    c = valid.collective
    if c is None:
        return f"a {valid.kind} job has no per-size results"
    for name, want in (("op", c.op), ("dtype", c.dtype), ("reduce_op", c.reduce_op)):
        got = getattr(row, name)
        if got != want:
            return f"{name} {got[:64]!r} is not the job's {want!r}"
    if row.world_size != valid.world_size:
        return f"world_size {row.world_size} is not the job's {valid.world_size}"
    if row.size_bytes not in valid.sizes and not (c.op == "barrier" and row.size_bytes == 0):
        return f"size {row.size_bytes} is not one the job measures"
    return ""
