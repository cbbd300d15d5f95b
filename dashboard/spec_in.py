"""Request models of the REST API: JobSpecIn and its parts mirror the proto's JobSpec field for
field (same names, so the body is the JobSpec as JSON, its oneof `kind` as one optional member
per kind of the table in ringleader/kinds.py); they check what one field alone can tell (types,
wire ranges, enumerations the domain exports) and the domain (ringleader.jobspec) checks the
rest. `to_pb` converts. A kind with no hand-written model here gets one generated from its proto
message, so adding a kind needs no change in this file.
"""

import functools
from typing import Annotated, Any, ClassVar, Literal

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pydantic import BaseModel, ConfigDict, Field, StrictBool, create_model, model_validator

from ringleader import jobspec, kinds
from ringleader.algos import SYMM_DTYPES
from ringleader import spec as specs
from ringleader.v1 import jobs_pb2 as pb

UINT32_MAX = 2**32 - 1
# JSON numbers as the schema has them: no true/false or "3" taken for a number (pydantic's lax
# mode would; StrictBool likewise takes no 0/1 for a bool).
JsonInt = Annotated[int, Field(strict=True)]
JsonFloat = Annotated[float, Field(strict=True)]
OpName = Literal[specs.OPS]  # type: ignore[valid-type]


def Text(max_length: int, description: str = "") -> Any:  # noqa: N802 - a type alias factory
    # (pydantic rejects the lone surrogates JSON can carry, which protobuf strings cannot hold)
    return Annotated[str, Field(max_length=max_length, description=description)]


ALGO_HELP = ('"" (the backend\'s own), nccl, gloo, nccl:ALGO[/PROTO] (ALGO ring|tree, PROTO ll|ll128|simple), '
             'symm:one_shot, symm:two_shot')


# ---- requests ------------------------------------------------------------------------------

# The request type of each proto scalar in generated models: what the wire can carry (strings are
# bounded as every string a user sends; no NaN or infinity; no integer taken for a bool).
INPUT_SCALARS: dict[int, Any] = {
    FieldDescriptor.TYPE_STRING: Annotated[str, Field(max_length=jobspec.MAX_TEXT)],
    FieldDescriptor.TYPE_BOOL: StrictBool,
    FieldDescriptor.TYPE_DOUBLE: Annotated[JsonFloat, Field(allow_inf_nan=False)],
    FieldDescriptor.TYPE_FLOAT: Annotated[JsonFloat, Field(allow_inf_nan=False)],
    FieldDescriptor.TYPE_INT32: Annotated[JsonInt, Field(ge=-(2**31), le=2**31 - 1)],
    FieldDescriptor.TYPE_INT64: Annotated[JsonInt, Field(ge=-(2**63), le=2**63 - 1)],
    FieldDescriptor.TYPE_UINT32: Annotated[JsonInt, Field(ge=0, le=UINT32_MAX)],
    FieldDescriptor.TYPE_UINT64: Annotated[JsonInt, Field(ge=0, le=2**64 - 1)],
}


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
    sizes: list[Annotated[JsonInt, Field(ge=1, le=specs.MAX_BYTES)]] = Field(
        default_factory=list, max_length=specs.MAX_SIZES,
        description="explicit sizes in bytes; when set, min_bytes, max_bytes and factor are ignored")
    min_bytes: JsonInt = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 8")
    max_bytes: JsonInt = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 64 MiB")
    factor: JsonFloat = Field(0.0, ge=0, le=specs.MAX_FACTOR, allow_inf_nan=False,
                          description="geometric step of the sweep; 0: 2")
    iters: JsonInt = Field(0, ge=0, le=specs.MAX_ITERS,
                       description="timed iterations; 0: auto (per size, a loop of at least 20 ms and 20 iterations)")
    warmup: JsonInt | None = Field(None, ge=0, le=specs.MAX_ITERS,
                               description="warm-up iterations; absent: 5 (0 allowed)")
    in_place: StrictBool = False
    root: JsonInt = Field(0, ge=0, le=UINT32_MAX, description="for reduce, broadcast, gather, scatter")
    graph: StrictBool = Field(False, description="capture the timed ops into a CUDA graph and replay it (NCCL only)")
    algo: Text(64, ALGO_HELP) = ""


class _SweepIn(BaseModel):
    """The size range of a p2p or algo sweep (their first four fields)."""

    model_config = ConfigDict(extra="forbid")

    sizes: list[Annotated[JsonInt, Field(ge=1, le=specs.MAX_BYTES)]] = Field(
        default_factory=list, max_length=specs.MAX_SIZES,
        description="explicit sizes in bytes; else min_bytes, max_bytes and factor as for collectives")
    min_bytes: JsonInt = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 8")
    max_bytes: JsonInt = Field(0, ge=0, le=specs.MAX_BYTES, description="0: 64 MiB")
    factor: JsonFloat = Field(0.0, ge=0, le=specs.MAX_FACTOR, allow_inf_nan=False, description="0: 2")


class AlgoSweepSpecIn(_SweepIn):
    """Every available all_reduce implementation over a size range: the fastest per size and
    the dispatch table."""

    algos: list[Text(64)] = Field(default_factory=list, max_length=32,
                                  description="empty: every algo the backend offers; " + ALGO_HELP)
    iters: JsonInt = Field(0, ge=0, le=specs.MAX_ITERS, description="0: auto")
    warmup: JsonInt | None = Field(None, ge=0, le=specs.MAX_ITERS, description="absent: 5")
    graph: StrictBool = Field(False, description="time each algo in CUDA-graph mode")
    dtype: Literal[("", *SYMM_DTYPES)] = Field("", description="empty: float32")  # type: ignore[valid-type]


class P2PSpecIn(_SweepIn):
    """Point-to-point ping-pong: one-way latency and bandwidth per size."""

    iters: JsonInt = Field(0, ge=0, le=specs.MAX_ITERS, description="0: 20")
    warmup: JsonInt | None = Field(None, ge=0, le=specs.MAX_ITERS, description="absent: 5")
    mode: Literal[("", *jobspec.P2P_MODES)] = Field(  # type: ignore[valid-type]
        "", description="blocking: send/recv (empty: blocking); async: isend/irecv + wait")
    pairwise: StrictBool = Field(False, description="every ordered pair of the gang in turn: a bandwidth matrix")


class GradientAverageSpecIn(BaseModel):
    """Gradient averaging on device (all_reduce) against host staging."""

    model_config = ConfigDict(extra="forbid")

    size_bytes: JsonInt = Field(0, ge=0, le=specs.MAX_BYTES, description="float32 gradient bytes; 0: 64 MiB")
    iters: JsonInt = Field(0, ge=0, le=specs.MAX_ITERS, description="0: 20")
    warmup: JsonInt | None = Field(None, ge=0, le=specs.MAX_ITERS, description="absent: 5")


class TrainSpecIn(BaseModel):
    """Data-parallel training (DistributedDataParallel) on synthetic data. steps, batch_size and
    lr are optional in the proto: absent means the default, an explicit value is checked."""

    model_config = ConfigDict(extra="forbid")

    model: Literal[("", *jobspec.MODELS)] = Field("", description="empty: linear")  # type: ignore[valid-type]
    steps: JsonInt | None = Field(None, ge=1, le=jobspec.MAX_TRAIN_STEPS, description="absent: 50")
    batch_size: JsonInt | None = Field(None, ge=1, le=jobspec.MAX_BATCH_SIZE, description="per rank; absent: 64")
    lr: JsonFloat | None = Field(None, gt=0, allow_inf_nan=False, description="absent: 0.05")
    seed: JsonInt = Field(0, ge=0, le=UINT32_MAX)


# Hand-written request models of the kinds built in; a kind without one gets a model generated
# from its proto message (`proto_input_model`), so adding a kind needs no change here.
SPEC_MODELS: dict[str, type[BaseModel]] = {
    "collective": CollectiveSpecIn, "p2p": P2PSpecIn, "gradient_average": GradientAverageSpecIn,
    "train": TrainSpecIn, "algo_sweep": AlgoSweepSpecIn,
}


def _kind() -> Any:
    return Field(None, json_schema_extra=lambda schema: schema.pop("default", None))


class JobSpecBase(BaseModel):
    """A job to run: the proto's JobSpec as JSON, with exactly one kind (its oneof `kind`)."""

    model_config = ConfigDict(extra="forbid")
    kind_names: ClassVar[tuple[str, ...]] = ()  # the kinds job_spec_model gave it members for

    world_size: JsonInt = Field(ge=1, le=jobspec.MAX_WORLD_SIZE)
    placement: PlacementIn = Field(default_factory=PlacementIn)
    priority: JsonInt = Field(0, ge=-jobspec.MAX_PRIORITY, le=jobspec.MAX_PRIORITY,
                          description="higher runs first, one level gained per minute waited; equal priorities "
                                      "run in submission order")
    name: Text(jobspec.MAX_TEXT, "free text shown in listings") = ""
    op_timeout_s: JsonFloat = Field(0.0, ge=0, le=jobspec.MAX_OP_TIMEOUT_S, allow_inf_nan=False,
                                description="a rank making no progress this long fails the job; 0: 120")
    rendezvous_timeout_s: JsonFloat = Field(0.0, ge=0, le=jobspec.MAX_OP_TIMEOUT_S, allow_inf_nan=False,
                                        description="forming a new process group must finish within this; 0: 30")
    queue_timeout_s: JsonFloat = Field(0.0, ge=0, le=jobspec.MAX_OP_TIMEOUT_S, allow_inf_nan=False,
                                   description="a queued job not placed within this is cancelled; 0: wait forever")
    preflight: StrictBool = Field(False, description="certify the gang just before the job starts")
    parent_id: Text(jobspec.MAX_TEXT, "the job this one works for (localize's probe jobs: the job they localize)") = ""
    # Not a JobSpec field: how the REST API treats a job the fleet cannot hold now (the CLI's --queue).
    queue: StrictBool = Field(False, description="accept the job even if the connected workers cannot run it now "
                                                 "(it waits for them); false: refuse it (422, world_size)")

    @model_validator(mode="after")
    def _one_kind(self) -> "JobSpecBase":
        given = [k for k in type(self).kind_names if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one job kind ({', '.join(type(self).kind_names)}); got {len(given)}")
        return self

    def to_pb(self) -> pb.JobSpec:
        # Absent optional fields (warmup, the other kinds) stay unset in the message.
        return json_format.ParseDict(self.model_dump(exclude_none=True, exclude={"queue"}), pb.JobSpec())


@functools.cache
def job_spec_model(table: tuple[kinds.Kind, ...]) -> type[JobSpecBase]:
    """JobSpecIn for a table of kinds: one optional member per kind (absent ones are None; null
    is not a value), exactly one of them set."""
    names = tuple(k.name for k in table)

    def one_kind_schema(schema: dict) -> None:
        schema["oneOf"] = [{"required": [name]} for name in names]

    members: dict[str, Any] = {}
    for k in table:
        model = SPEC_MODELS.get(k.name) or proto_input_model(pb.JobSpec.DESCRIPTOR.fields_by_name[k.name].message_type)
        members[k.name] = (model, _kind())
    model = create_model("JobSpecIn", __base__=JobSpecBase, __doc__=JobSpecBase.__doc__, **members)
    model.model_config["json_schema_extra"] = one_kind_schema
    model.kind_names = names
    model.model_rebuild(force=True)
    return model


def proto_input_model(desc: Descriptor) -> type[BaseModel]:
    """A request model for a proto message no hand-written model covers: its fields with the
    proto's defaults (optional ones absent), strict types; the domain checks the values."""
    fields: dict[str, Any] = {}
    for f in desc.fields:
        if f.message_type is not None:
            t: Any = proto_input_model(f.message_type)
            default: Any = None
        elif f.enum_type is not None:
            t, default = Literal[tuple(v.name for v in f.enum_type.values)], f.enum_type.values[0].name
        else:
            t = INPUT_SCALARS[f.type]
            default = None if f.has_presence else f.default_value
        if f.is_repeated:
            fields[f.name] = (list[t], Field(default_factory=list))
        else:
            fields[f.name] = (t | None, default) if default is None else (t, default)
    return create_model(f"{desc.name}In", __config__=ConfigDict(extra="forbid"), **fields)


JobSpecIn = job_spec_model(kinds.TABLE)


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Text(jobspec.MAX_TEXT, "recorded as the job's reason; empty: cancelled by user") = ""
