"""Job and worker documents for people and tools (`ringleader job -o json|yaml`, the REST API's
job documents): the messages' JSON (ringleader/jsonview.py) made lean.

- times are RFC 3339 strings in UTC ("2026-11-24T06:30:00.125Z"), and a time not reached yet (a
  running job's finished_at) is absent rather than 0;
- a job carries the outcome of its own kind only, not empty objects of the other kinds;
- a spec's `iters` of 0 reads `auto`, what it means (chosen per size), not a count of 0.

The REST API gives the full message JSON (epoch seconds, every outcome) with `?view=full`.
"""

from __future__ import annotations

import datetime as dt

from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

TIME_FIELDS = frozenset({"created_at", "started_at", "finished_at", "last_heartbeat", "connected_at",
                         "recheck_at", "at"})
# A Job's outcome fields, one per kind (or a check); only the one that is set is shown.
OUTCOMES = frozenset(f.name for f in pb.Job.DESCRIPTOR.fields
                     if f.message_type is not None and f.name not in ("spec", "progress", "workers", "results"))
# Spec members whose iters 0 means auto (ringleader/spec.py AUTO_ITERS).
AUTO_ITERS_KINDS = ("collective", "algo_sweep")


def rfc3339(seconds: float) -> str:
    t = dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def times(value):
    """`value` with every time field as RFC 3339 (unset times removed), at any depth."""
    if isinstance(value, list):
        return [times(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in TIME_FIELDS and isinstance(v, (int, float)) and not isinstance(v, bool):
            if v > 0:
                out[k] = rfc3339(v)
        else:
            out[k] = times(v)
    return out


def job_body(job: pb.Job, body: dict) -> dict:
    """`body` (to_json of `job`) without the outcome objects of kinds the job is not."""
    out = times({k: v for k, v in body.items() if k not in OUTCOMES or job.HasField(k)})
    spec = out.get("spec")
    for kind in AUTO_ITERS_KINDS:
        member = spec.get(kind) if isinstance(spec, dict) else None
        if isinstance(member, dict) and member.get("iters") == 0:
            member["iters"] = "auto"
    return out


def lean_job(job: pb.Job, results: bool = True) -> dict:
    """The lean document of one job (without `results` when results is False: listings)."""
    body = job_body(job, to_json(job))
    if not results:
        body.pop("results", None)
    return body
