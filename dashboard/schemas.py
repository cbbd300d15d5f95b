"""Pydantic models of the REST API, for validation and the OpenAPI document.

Requests: JobSpecIn and its parts mirror the proto's JobSpec field for field (same names, so the
body is the JobSpec as JSON, its oneof `kind` as one of the optional kind fields); they check
what one field alone can tell (types, wire ranges, enumerations that the domain exports) and
the domain (ringleader.jobspec) checks the rest. `to_pb` converts.

Responses: every body is `ringleader.jsonview.to_json` of a proto message; their models are
generated from the proto descriptors so the documented shape cannot drift from what is sent.
"""

import math
from typing import Annotated, Any, Literal

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from ringleader import jobspec
from ringleader.algos import SYMM_DTYPES
from ringleader import spec as specs
from ringleader.v1 import jobs_pb2 as pb

UINT32_MAX = 2**32 - 1


def Text(max_length: int, description: str = "") -> Any:  # noqa: N802 - a type alias factory
    # (pydantic rejects the lone surrogates JSON can carry, which protobuf strings cannot hold)
    return Annotated[str, Field(max_length=max_length, description=description)]


JOB_STATES = tuple(name for name in pb.JobState.keys() if name != "JOB_STATE_UNSPECIFIED")
JobStateName = Literal[JOB_STATES]  # type: ignore[valid-type]
WORKER_STATES = tuple(name for name in pb.WorkerState.keys() if name != "WORKER_STATE_UNSPECIFIED")
WorkerStateName = Literal[WORKER_STATES]  # type: ignore[valid-type]
JobId = Annotated[str, Path(max_length=jobspec.MAX_TEXT)]
OpName = Literal[specs.OPS]  # type: ignore[valid-type]
ResultFormat = Literal["json", "csv"]
ALGO_HELP = ('"" (the backend\'s own), nccl, gloo, nccl:ALGO[/PROTO] (ALGO ring|tree, PROTO ll|ll128|simple), '
             'symm:one_shot, symm:two_shot')


# ---- requests ------------------------------------------------------------------------------


class PlacementIn(BaseModel):
    """Where a job may run. Every field narrows the set of eligible workers."""

    model_config = ConfigDict(extra="forbid")

    host: Text(jobspec.MAX_TEXT, "only workers on this host") = ""
    gpu_model: Text(jobspec.MAX_TEXT, 'substring of the device name, e.g. "H200"') = ""
    worker_ids: list[Text(jobspec.MAX_TEXT)] = Field(
        default_factory=list, max_length=jobspec.MAX_WORLD_SIZE,
        description="exactly these workers (then world_size must equal their count)")
    device_type: Literal["", "cuda", "cpu"] = Field("", description="empty: whichever can run it")


class CollectiveSpecIn(BaseModel):
    """A collective benchmark sweep, nccl-tests style."""

    model_config = ConfigDict(extra="forbid")

    op: OpName
    dtype: Literal[("", *specs.DTYPE_SIZES)] = Field("", description="empty: float32")  # type: ignore[valid-type]
    reduce_op: Literal[("", *specs.REDUCE_OPS)] = Field("", description="empty: sum")  # type: ignore[valid-type]
    sizes: list[Annotated[int, Field(ge=1, le=specs.MAX_BYTES)]] = Field(
        default_factory=list, max_length=specs.MAX_SIZES,
        description="explicit sizes in bytes; when set, min_bytes, max_bytes and factor are ignored")
    min_bytes: int = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 8")
    max_bytes: int = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 64 MiB")
    factor: float = Field(0.0, ge=0, le=specs.MAX_FACTOR, allow_inf_nan=False,
                          description="geometric step of the sweep; 0: 2")
    iters: int = Field(0, ge=0, le=specs.MAX_ITERS,
                       description="timed iterations; 0: auto (per size, a loop of at least 20 ms and 20 iterations)")
    warmup: int | None = Field(None, ge=0, le=specs.MAX_ITERS,
                               description="warm-up iterations; absent: 5 (0 allowed)")
    in_place: bool = False
    root: int = Field(0, ge=0, le=UINT32_MAX, description="for reduce, broadcast, gather, scatter")
    graph: bool = Field(False, description="capture the timed ops into a CUDA graph and replay it (NCCL only)")
    algo: Text(64, ALGO_HELP) = ""


class _SweepIn(BaseModel):
    """The size range of a p2p or algo sweep (their first four fields)."""

    model_config = ConfigDict(extra="forbid")

    sizes: list[Annotated[int, Field(ge=1, le=specs.MAX_BYTES)]] = Field(
        default_factory=list, max_length=specs.MAX_SIZES,
        description="explicit sizes in bytes; else min_bytes, max_bytes and factor as for collectives")
    min_bytes: int = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 8")
    max_bytes: int = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 64 MiB")
    factor: float = Field(0.0, ge=0, le=specs.MAX_FACTOR, allow_inf_nan=False, description="0: 2")


class AlgoSweepSpecIn(_SweepIn):
    """Every available all_reduce implementation over a size range: the fastest per size and
    the dispatch table."""

    algos: list[Text(64)] = Field(default_factory=list, max_length=32,
                                  description="empty: every algo the backend offers; " + ALGO_HELP)
    iters: int = Field(0, ge=0, le=specs.MAX_ITERS, description="0: auto")
    warmup: int | None = Field(None, ge=0, le=specs.MAX_ITERS, description="absent: 5")
    graph: bool = Field(False, description="time each algo in CUDA-graph mode")
    dtype: Literal[("", *SYMM_DTYPES)] = Field("", description="empty: float32")  # type: ignore[valid-type]


class P2PSpecIn(_SweepIn):
    """Point-to-point ping-pong: one-way latency and bandwidth per size."""

    iters: int = Field(0, ge=0, le=specs.MAX_ITERS, description="0: 20")
    warmup: int | None = Field(None, ge=0, le=specs.MAX_ITERS, description="absent: 5")
    mode: Literal[("", *jobspec.P2P_MODES)] = Field(  # type: ignore[valid-type]
        "", description="blocking: send/recv (empty: blocking); async: isend/irecv + wait")
    pairwise: bool = Field(False, description="every ordered pair of the gang in turn: a bandwidth matrix")


class GradientAverageSpecIn(BaseModel):
    """Gradient averaging on device (all_reduce) against host staging."""

    model_config = ConfigDict(extra="forbid")

    size_bytes: int = Field(0, ge=0, le=specs.MAX_BYTES, description="float32 gradient bytes; 0: 64 MiB")
    iters: int = Field(0, ge=0, le=specs.MAX_ITERS, description="0: 20")
    warmup: int | None = Field(None, ge=0, le=specs.MAX_ITERS, description="absent: 5")


class TrainSpecIn(BaseModel):
    """Data-parallel training (DistributedDataParallel) on synthetic data. steps, batch_size and
    lr are optional in the proto: absent means the default, an explicit value is checked."""

    model_config = ConfigDict(extra="forbid")

    model: Literal[("", *jobspec.MODELS)] = Field("", description="empty: linear")  # type: ignore[valid-type]
    steps: int | None = Field(None, ge=1, le=jobspec.MAX_TRAIN_STEPS, description="absent: 50")
    batch_size: int | None = Field(None, ge=1, le=jobspec.MAX_BATCH_SIZE, description="per rank; absent: 64")
    lr: float | None = Field(None, gt=0, allow_inf_nan=False, description="absent: 0.05")
    seed: int = Field(0, ge=0, le=UINT32_MAX)


KINDS = jobspec.KINDS


def _kind() -> Any:
    return Field(None, json_schema_extra=lambda schema: schema.pop("default", None))


def _one_kind_schema(schema: dict) -> None:
    schema["oneOf"] = [{"required": [kind]} for kind in KINDS]


class JobSpecIn(BaseModel):
    """A job to run: the proto's JobSpec as JSON, with exactly one kind (collective, p2p,
    gradient_average, train or algo_sweep)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_kind_schema)

    world_size: int = Field(ge=1, le=jobspec.MAX_WORLD_SIZE)
    placement: PlacementIn = Field(default_factory=PlacementIn)
    priority: int = Field(0, ge=-jobspec.MAX_PRIORITY, le=jobspec.MAX_PRIORITY,
                          description="higher runs first, one level gained per minute waited; equal priorities "
                                      "run in submission order")
    name: Text(jobspec.MAX_TEXT, "free text shown in listings") = ""
    op_timeout_s: float = Field(0.0, ge=0, le=jobspec.MAX_OP_TIMEOUT_S, allow_inf_nan=False,
                                description="a rank making no progress this long fails the job; 0: 120")
    # The oneof `kind`: exactly one of these (absent ones are None; null is not a value).
    collective: CollectiveSpecIn = _kind()
    p2p: P2PSpecIn = _kind()
    gradient_average: GradientAverageSpecIn = _kind()
    train: TrainSpecIn = _kind()
    algo_sweep: AlgoSweepSpecIn = _kind()

    @model_validator(mode="after")
    def _one_kind(self) -> "JobSpecIn":
        kinds = [k for k in KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"set exactly one job kind ({', '.join(KINDS)}); got {len(kinds)}")
        return self

    def to_pb(self) -> pb.JobSpec:
        # Absent optional fields (warmup, the other kinds) stay unset in the message.
        return json_format.ParseDict(self.model_dump(exclude_none=True), pb.JobSpec())


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Text(jobspec.MAX_TEXT, "recorded as the job's reason; empty: cancelled by user") = ""


# ---- responses -----------------------------------------------------------------------------

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


Job = proto_model(pb.Job.DESCRIPTOR)
JobSummary = proto_model(pb.Job.DESCRIPTOR, name="JobSummary", exclude=("results",))
SizeResult = proto_model(pb.SizeResult.DESCRIPTOR)
WorkerInfo = proto_model(pb.WorkerInfo.DESCRIPTOR)
JobLogs = proto_model(pb.JobLogs.DESCRIPTOR)

RESULT_FIELDS = tuple(f.name for f in pb.SizeResult.DESCRIPTOR.fields)  # the CSV columns, proto order


class JobList(BaseModel):
    jobs: list[JobSummary]  # type: ignore[valid-type]
    next_before: str | None = Field(
        description="pass as `before` for the next (older) page; null on the last page")


class ResultList(BaseModel):
    results: list[SizeResult]  # type: ignore[valid-type]


class WorkerList(BaseModel):
    workers: list[WorkerInfo]  # type: ignore[valid-type]
    next_page_token: str | None = Field(
        description="pass as `page_token` for the next page; null on the last page")


class VersionInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(description="ringleader's version (the coordinator's)")
    api_version: Literal["v1"] = Field(description="the REST and gRPC API version (ringleader.v1)")
    python: str
    grpc: str = Field(description="grpcio's version")
    protobuf: str


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
