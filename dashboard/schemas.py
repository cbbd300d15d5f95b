"""Pydantic models of the REST API, for validation and the OpenAPI document.

Requests: dashboard/spec_in.py (JobSpecIn mirrors the proto's JobSpec, one member per kind of
the table in ringleader/kinds.py), re-exported here.

Responses: every body is `ringleader.jsonview.to_json` of a proto message; their models are
generated from the proto descriptors so the documented shape cannot drift from what is sent.
"""

import math
from typing import Annotated, Any, Literal

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, create_model

# The request models (re-exported: this module is the REST API's one list of models).
from dashboard.spec_in import (  # noqa: F401
    SPEC_MODELS, AlgoSweepSpecIn, CancelIn, CollectiveSpecIn, GradientAverageSpecIn, JobSpecBase, JobSpecIn,
    OpName, P2PSpecIn, PlacementIn, TrainSpecIn, job_spec_model, proto_input_model,
)
from ringleader import jobspec
from ringleader.leanjson import AUTO_ITERS_KINDS, OUTCOMES, TIME_FIELDS
from ringleader.v1 import jobs_pb2 as pb

JOB_STATES = tuple(name for name in pb.JobState.keys() if name != "JOB_STATE_UNSPECIFIED")
JobStateName = Literal[JOB_STATES]  # type: ignore[valid-type]
WORKER_STATES = tuple(name for name in pb.WorkerState.keys() if name != "WORKER_STATE_UNSPECIFIED")
WorkerStateName = Literal[WORKER_STATES]  # type: ignore[valid-type]
JobId = Annotated[str, Path(max_length=jobspec.MAX_TEXT)]
ResultFormat = Literal["json", "csv"]


# ---- responses -----------------------------------------------------------------------------

# The Python type of each proto scalar (response models).
_SCALARS: dict[int, Any] = {
    FieldDescriptor.TYPE_STRING: str,
    FieldDescriptor.TYPE_BOOL: bool,
    FieldDescriptor.TYPE_DOUBLE: float,
    FieldDescriptor.TYPE_FLOAT: float,
    FieldDescriptor.TYPE_INT32: int,
    FieldDescriptor.TYPE_INT64: int,
    FieldDescriptor.TYPE_SINT32: int,
    FieldDescriptor.TYPE_SINT64: int,
    FieldDescriptor.TYPE_SFIXED32: int,
    FieldDescriptor.TYPE_SFIXED64: int,
    FieldDescriptor.TYPE_UINT32: Annotated[int, Field(ge=0)],
    FieldDescriptor.TYPE_UINT64: Annotated[int, Field(ge=0)],
    FieldDescriptor.TYPE_FIXED32: Annotated[int, Field(ge=0)],
    FieldDescriptor.TYPE_FIXED64: Annotated[int, Field(ge=0)],
}


_models: dict[str, type[BaseModel]] = {}


def proto_model(desc: Descriptor, name: str = "", exclude: tuple[str, ...] = ()) -> type[BaseModel]:
    """The model of `to_json(message)`: every field present, except unset message members of a
    oneof (left out); enums as their names; 64-bit integers as numbers."""
    name = name or desc.name
    if name in _models:
        return _models[name]
    fields: dict[str, Any] = {}
    for f in desc.fields:
        if f.name in exclude:
            continue
        if f.message_type is not None and f.message_type.GetOptions().map_entry:  # a map: a JSON object
            v = f.message_type.fields_by_name["value"]
            fields[f.name] = (dict[str, proto_model(v.message_type) if v.message_type else _SCALARS[v.type]], ...)
            continue
        if f.message_type is not None:
            t: Any = proto_model(f.message_type)
        elif f.enum_type is not None:
            t = Literal[tuple(v.name for v in f.enum_type.values)]
        else:
            t = _SCALARS[f.type]
        if f.is_repeated:
            t = list[t]
        oneof_member = f.message_type is not None and f.containing_oneof is not None
        fields[f.name] = (t | None, None) if oneof_member else (t, ...)
    model = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    _models[name] = model
    return model


# The spec messages whose iters 0 the lean view says as "auto".
_AUTO_ITERS = {pb.JobSpec.DESCRIPTOR.fields_by_name[k].message_type.name for k in AUTO_ITERS_KINDS}


def _has_times(desc: Descriptor, seen: frozenset = frozenset()) -> bool:
    """Whether the lean view rewrites something in this message, at any depth."""
    if desc.full_name in seen:
        return False
    return desc.name in _AUTO_ITERS or desc is pb.Job.DESCRIPTOR or any(
        f.name in TIME_FIELDS or (f.message_type is not None and _has_times(f.message_type, seen | {desc.full_name}))
        for f in desc.fields)


def lean_model(desc: Descriptor, name: str = "", exclude: tuple[str, ...] = ()) -> type[BaseModel]:
    """The model of ringleader.leanjson's document of a message: times as RFC 3339 strings, absent
    until set; a job's outcome members optional (only its own kind's is there); a spec's iters a
    count or "auto". Messages with none of these are proto_model's."""
    name = name or "Lean" + desc.name
    if name in _models:
        return _models[name]
    fields: dict[str, Any] = {}
    for f in desc.fields:
        if f.name in exclude:
            continue
        if f.message_type is not None and not f.message_type.GetOptions().map_entry:
            sub = f.message_type
            t: Any = lean_model(sub) if _has_times(sub) else proto_model(sub)
            t = list[t] if f.is_repeated else t
            optional = f.containing_oneof is not None or (desc is pb.Job.DESCRIPTOR and f.name in OUTCOMES)
            fields[f.name] = (t | None, None) if optional else (t, ...)
        elif f.name in TIME_FIELDS and not f.is_repeated:
            fields[f.name] = (str | None, Field(None, json_schema_extra={"format": "date-time"}))
        elif f.name == "iters" and desc.name in _AUTO_ITERS:
            fields[f.name] = (int | Literal["auto"], ...)
        else:
            fields[f.name] = proto_model(desc).model_fields[f.name].annotation, ...
    model = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    _models[name] = model
    return model


Job = proto_model(pb.Job.DESCRIPTOR)
JobSummary = proto_model(pb.Job.DESCRIPTOR, name="JobSummary", exclude=("results",))
LeanJob = lean_model(pb.Job.DESCRIPTOR)
LeanJobSummary = lean_model(pb.Job.DESCRIPTOR, name="LeanJobSummary", exclude=("results",))
SizeResult = proto_model(pb.SizeResult.DESCRIPTOR)
WorkerInfo = proto_model(pb.WorkerInfo.DESCRIPTOR)
JobLogs = proto_model(pb.JobLogs.DESCRIPTOR)

JobEvent = proto_model(pb.JobEvent.DESCRIPTOR)

RESULT_FIELDS = tuple(f.name for f in pb.SizeResult.DESCRIPTOR.fields)  # the CSV columns, proto order


class JobList(BaseModel):
    jobs: list[LeanJobSummary | JobSummary]  # type: ignore[valid-type]  # ?view=lean (default) or full
    next_before: str | None = Field(
        description="pass as `before` for the next (older) page; null on the last page")
    read_view_age_ms: int = Field(ge=0, description="how old the coordinator's read view was when it answered "
                                                    "(ms; also the X-Read-View-Age-Ms header)")


class ResultList(BaseModel):
    results: list[SizeResult]  # type: ignore[valid-type]


class WorkerList(BaseModel):
    workers: list[WorkerInfo]  # type: ignore[valid-type]
    next_page_token: str | None = Field(
        description="pass as `page_token` for the next page; null on the last page")
    read_view_age_ms: int = Field(ge=0, description="how old the coordinator's read view was when it answered "
                                                    "(ms; also the X-Read-View-Age-Ms header)")


class KindInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the JobSpec member that holds its spec")
    listed_as: list[str] = Field(description="what `op` in job listings calls its jobs (a sweep: its op)")
    result: str = Field(description='the Job member holding its outcome; "": rows in `results`')


class KindList(BaseModel):
    kinds: list[KindInfo]


class VersionInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="ringleader's version (the coordinator's)")
    api_version: Literal["v1"] = Field(description="the REST and gRPC API version (ringleader.v1)")
    python: str
    grpc: str = Field(description="grpcio's version")
    protobuf: str


class LiveEvent(BaseModel):
    """One event of GET /api/v1/events: the JobEvent and its job."""

    model_config = ConfigDict(extra="forbid")

    event: JobEvent  # type: ignore[valid-type]
    job: JobSummary  # type: ignore[valid-type]


EVENT_NAMES = tuple(f.name for f in pb.JobEvent.DESCRIPTOR.oneofs_by_name["event"].fields)


def sse_response(description: str, data: type[BaseModel], with_id: bool) -> dict[int | str, dict[str, Any]]:
    """A 200 of Server-Sent Events. Its `schema` is one event's, as OpenAPI tools read a
    text/event-stream's: its fields, `data` a JSON text of `data`'s model (contentSchema,
    self-contained: no $ref)."""
    props: dict[str, Any] = {
        "event": {"type": "string", "enum": list(EVENT_NAMES)},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": inline_schema(data)},
    }
    if with_id:
        props["id"] = {"type": "string", "pattern": "^[0-9]+$", "description": "the event's seq (absent for progress)"}
    event = {"type": "object", "required": ["event", "data"], "properties": props}
    return {200: {"description": description, "content": {"text/event-stream": {"schema": event}}}}


def inline_schema(model: type[BaseModel]) -> dict:
    """`model`'s JSON schema with every $ref replaced by what it names (the models are not recursive)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[1]])
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    return resolve(schema)


class Error(BaseModel):
    detail: str


def json_safe(value: Any) -> Any:
    """`value` with what JSON cannot carry replaced: non-finite floats by null, lone surrogates
    in strings by their escapes."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
