"""REST routes of fleet health under /api/v1: run checks, cordon and uncordon workers, and the
fleet's health at a glance (docs/fleet-health.md). The writes are the use cases the gRPC RPCs
RunCheck, CordonWorker, UncordonWorker and ApproveWorkerReturn call (coordinator/edge/usecases.py);
errors through dashboard/api.py's one mapping."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, create_model

from coordinator.health import sweeper
from coordinator.shell.facade import Coordinator
from coordinator.edge import usecases
from dashboard.api import BUSY, JSON, UNPARSEABLE, Route, domain_errors
from dashboard.schemas import Error, WorkerInfo, proto_model
from dashboard.spec_in import proto_input_model
from ringleader import checks, jobspec, kinds
from ringleader.defaults import PAGE_DEFAULT, PAGE_MAX
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

CheckKind = Literal[checks.KINDS]  # type: ignore[valid-type]
WorkerId = Annotated[str, Path(max_length=jobspec.MAX_TEXT)]
RunCheckAnswer = proto_model(pb.RunCheckResponse.DESCRIPTOR)
HooksLogAnswer = proto_model(pb.HooksLogResponse.DESCRIPTOR)
SweepPlanAnswer = proto_model(pb.SweepPlanResponse.DESCRIPTOR)
U32 = 0xFFFFFFFF  # the proto's uint32 fields: larger would fail to convert (a 500, not a 422)
UNKNOWN_WORKER = {404: {"model": Error, "description": "No worker with this id"}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LinkMatrixIn(_Strict):
    size_bytes: int = Field(0, ge=0, le=(1 << 64) - 1, description="ping-pong size (0: 512 KiB for a check)")
    iters: int = Field(0, ge=0, le=U32)
    warmup: int | None = Field(None, ge=0, le=U32)


class GpuCheckIn(_Strict):
    matmul_n: int = Field(0, ge=0, le=U32, description="0: the device's default (8192 on GPU, 512 on CPU)")
    dtype: str = Field("", max_length=16)
    copy_bytes: int = Field(0, ge=0, le=(1 << 64) - 1)
    iters: int = Field(0, ge=0, le=U32)


class SdcCheckIn(_Strict):
    seed: int = Field(0, ge=0, lt=1 << 32)
    rounds: int = Field(0, ge=0, le=U32)


# Hand-written models of the checks built in; a check kind without one (a new row of the kind
# table) gets a model generated from its proto message, so adding a check needs no change here.
CHECK_MODELS: dict[str, type[BaseModel]] = {"link_matrix": LinkMatrixIn, "gpu_check": GpuCheckIn,
                                            "sdc_check": SdcCheckIn}


class _RunCheckBase(_Strict):
    """Which workers to check (exactly `worker_ids`; else those on `host`; else all connected)."""

    worker_ids: list[Annotated[str, Field(max_length=jobspec.MAX_TEXT)]] = Field(default_factory=list, max_length=65536)
    host: str = Field("", max_length=jobspec.MAX_TEXT)
    kinds: list[CheckKind] = Field(default_factory=list, description="default: every check")  # type: ignore[valid-type]
    wait: bool = Field(False, description="answer once the checks have finished, with their verdicts")
    timeout_s: float = Field(0, ge=0, le=sweeper.MAX_WAIT_S)

    def to_pb(self) -> pb.RunCheckRequest:
        return json_format.ParseDict(self.model_dump(exclude_none=True), pb.RunCheckRequest())


def run_check_model() -> type[_RunCheckBase]:
    """The body of POST /checks: the common fields, and each check's settings, by its table row."""
    per_kind: dict = {}
    for k in kinds.checks():
        model = CHECK_MODELS.get(k.name) or proto_input_model(pb.JobSpec.DESCRIPTOR.fields_by_name[k.name].message_type)
        per_kind[k.name] = (model | None, None)
    return create_model("RunCheckIn", __base__=_RunCheckBase, **per_kind)


RunCheckIn = run_check_model()


class FleetHealth(_Strict):
    counts: dict[str, int] = Field(description="workers per verdict (HEALTHY, SUSPECT, UNHEALTHY, "
                                   "UNCHECKED: never checked, as the CLI says), CORDONED and BREAKER_HELD")
    quarantined: list[str]
    breaker_held: list[str] = Field(description="failed workers the circuit breaker left in service "
                                    "(--quarantine-max-share): an operator decides")
    alerts: list[str] = Field(description="the circuit breaker's latest alerts, newest last")
    findings: list[str] = Field(default_factory=list, description="standing fleet- or host-wide findings: workers "
                                "below their expectation alike (WorkerHealth.finding), shown even when the "
                                "circuit breaker holds their quarantines")
    attention: list[WorkerInfo]  # type: ignore[valid-type]
    observe: bool = Field(False, description="fleet health observes only (--health-observe): no verdict "
                                             "quarantines a worker or taints a node")
    config_drift: list[dict[str, str]] = Field(default_factory=list, description=(
        "connected workers configured unlike the others of their backend and device model: worker_id, host "
        "and how it differs (versions, topology, NCCL/network settings)"))


def router(core: Coordinator) -> APIRouter:
    r = APIRouter(prefix="/api/v1", route_class=Route)

    @r.post("/checks", tags=["workers"], operation_id="runCheck", response_model=RunCheckAnswer,
            summary="Run fleet health checks now", responses={**UNKNOWN_WORKER, **UNPARSEABLE, **BUSY},
            description="Link matrix, GPU compute and memory, silent data corruption, as check jobs at the "
                        "lowest priority. With `wait`, the answer carries the finished jobs, the hosts named "
                        "and every checked worker's health.")
    async def run_check(body: RunCheckIn) -> Response:
        with domain_errors():
            answer = await usecases.run_check(core, body.to_pb())
        return JSON(to_json(answer))

    for action in ("cordon", "uncordon"):
        _cordon_route(r, core, action)
    _kind_routes(r, core)

    @r.post("/workers/{worker_id}/approve-return", tags=["workers"], operation_id="approveWorkerReturn",
            response_model=WorkerInfo, responses={**UNKNOWN_WORKER, 409: {"model": Error, "description":
                                                  "It needs no approval, or has not passed since its quarantine"}},
            summary="Let a worker quarantined 3 times within 24 h back, after a passed validation")
    async def approve_return(worker_id: WorkerId) -> Response:
        with domain_errors():
            info = await usecases.approve_return(core, worker_id)
        return JSON(to_json(info))

    @r.get("/hooks/log", tags=["workers"], operation_id="getHooksLog", response_model=HooksLogAnswer,
           summary="The remediation hooks' delivery log, newest first (docs/hooks.md)")
    async def hooks_log(limit: Annotated[int, Query(ge=0, le=PAGE_MAX, description="0: the default page")] = 0
                        ) -> Response:
        return JSON(to_json(pb.HooksLogResponse(deliveries=core.store.hook_deliveries(limit or PAGE_DEFAULT))))

    @r.get("/checks/plan", tags=["workers"], operation_id="getSweepPlan", response_model=SweepPlanAnswer,
           summary="The health sweeps' plan: each kind in the order the next sweep takes it, how stale, what was skipped")
    async def sweep_plan() -> Response:
        return JSON(to_json(core.fleet.sweep_plan()))

    @r.get("/fleet/health", tags=["workers"], operation_id="getFleetHealth", response_model=FleetHealth,
           summary="The fleet's health: counts per verdict, the quarantined, who needs attention")
    async def fleet_health() -> Response:
        book = core.fleet.book
        workers = core.fleet.all_workers()
        # Verdict names, and UNCHECKED for none yet (the proto's zero value is no verdict's name).
        counts = {k: v for k, v in book.counts().items() if k != "VERDICT_UNSPECIFIED"}
        counts["UNCHECKED"] = sum(1 for w in workers if not w.health.verdict)
        # Failed first, then suspect, then cordoned: what is wrong is listed first.
        order = {pb.UNHEALTHY: 0, pb.SUSPECT: 1}
        attention = sorted((w for w in workers if w.health.verdict in order or w.health.cordoned),
                           key=lambda w: (order.get(w.health.verdict, 2), w.host, w.worker_id))
        return JSON({"counts": dict(counts), "quarantined": book.quarantined_ids(), "breaker_held": book.held_ids(),
                     "alerts": core.alerts[-20:], "attention": [to_json(w) for w in attention],
                     "observe": book.observe,
                     "config_drift": [{"worker_id": w.worker_id, "host": w.host, "drift": w.config_drift}
                                      for w in workers if w.config_drift],
                     "findings": list(dict.fromkeys(w.health.finding for w in workers if w.health.finding))})

    return r


def _cordon_route(r: APIRouter, core: Coordinator, action: str) -> None:
    on = action == "cordon"

    @r.post(f"/workers/{{worker_id}}/{action}", tags=["workers"], operation_id=f"{action}Worker",
            response_model=WorkerInfo, responses=UNKNOWN_WORKER,
            summary="Keep a worker out of user jobs" if on else "Put a cordoned or failed worker back in service")
    async def cordon(worker_id: WorkerId, force: Annotated[bool, Query(
            description="uncordon: put back a worker whose latest verdict failed without the recheck it "
                        "otherwise gets first")] = False) -> Response:
        with domain_errors():
            info = await usecases.cordon(core, worker_id, on, force)
        return JSON(to_json(info))


class JobHeader(_Strict):
    job_id: str
    kind: str
    header: str = Field(description="one line for the job's page, e.g. \"gpu_check · 8192 · bf16\"")


def _kind_routes(r: APIRouter, core: Coordinator) -> None:
    """A job's header by its kind's row of the table (ringleader/kinds.py); the rows themselves
    are GET /api/v1/kinds (dashboard/api.py)."""

    @r.get("/jobs/{job_id}/header", tags=["jobs"], operation_id="getJobHeader", response_model=JobHeader,
           responses={404: {"model": Error, "description": "no such job"}},
           summary="A job's one-line header, by its kind's row of the table")
    async def job_header(job_id: Annotated[str, Path(max_length=jobspec.MAX_TEXT)]) -> Response:
        with domain_errors():
            job = core.get(job_id)
        return JSON({"job_id": job.id, "kind": job.spec.WhichOneof("kind") or "", "header": kinds.header(job.spec)})
