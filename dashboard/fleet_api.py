"""REST routes of fleet health under /api/v1: run checks, cordon and uncordon workers, and the
fleet's health at a glance (docs/fleet-health.md). The same facade calls as the gRPC RPCs
RunCheck, CordonWorker and UncordonWorker; errors through dashboard/api.py's one mapping."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path
from fastapi.responses import Response
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field

from coordinator.health import sweeper
from coordinator.core.facade import Coordinator
from dashboard.api import JSON, UNPARSEABLE, Route, domain_errors
from dashboard.schemas import Error, WorkerInfo, proto_model
from ringleader import checks, jobspec
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

CheckKind = Literal[checks.KINDS]  # type: ignore[valid-type]
WorkerId = Annotated[str, Path(max_length=jobspec.MAX_TEXT)]
RunCheckAnswer = proto_model(pb.RunCheckResponse.DESCRIPTOR)
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


class RunCheckIn(_Strict):
    """Which workers to check (exactly `worker_ids`; else those on `host`; else all connected)."""

    worker_ids: list[Annotated[str, Field(max_length=jobspec.MAX_TEXT)]] = Field(default_factory=list, max_length=65536)
    host: str = Field("", max_length=jobspec.MAX_TEXT)
    kinds: list[CheckKind] = Field(default_factory=list, description="default: all three")  # type: ignore[valid-type]
    link_matrix: LinkMatrixIn | None = None
    gpu_check: GpuCheckIn | None = None
    sdc_check: SdcCheckIn | None = None
    wait: bool = Field(False, description="answer once the checks have finished, with their verdicts")
    timeout_s: float = Field(0, ge=0, le=sweeper.MAX_WAIT_S)

    def to_pb(self) -> pb.RunCheckRequest:
        return json_format.ParseDict(self.model_dump(exclude_none=True), pb.RunCheckRequest())


class FleetHealth(_Strict):
    counts: dict[str, int] = Field(description="workers per verdict (HEALTHY, SUSPECT, UNHEALTHY, "
                                   "UNCHECKED: never checked, as the CLI says) and CORDONED")
    quarantined: list[str]
    attention: list[WorkerInfo]  # type: ignore[valid-type]


def router(core: Coordinator) -> APIRouter:
    r = APIRouter(prefix="/api/v1", route_class=Route)

    @r.post("/checks", tags=["workers"], operation_id="runCheck", response_model=RunCheckAnswer,
            summary="Run fleet health checks now", responses={**UNKNOWN_WORKER, **UNPARSEABLE},
            description="Link matrix, GPU compute and memory, silent data corruption, as check jobs at the "
                        "lowest priority. With `wait`, the answer carries the finished jobs, the hosts named "
                        "and every checked worker's health.")
    async def run_check(body: RunCheckIn) -> Response:
        with domain_errors():
            answer = await sweeper.run_check(core, core.fleet, body.to_pb())
        return JSON(to_json(answer))

    for action in ("cordon", "uncordon"):
        _cordon_route(r, core, action)

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
        return JSON({"counts": dict(counts), "quarantined": book.quarantined_ids(),
                     "attention": [to_json(w) for w in attention]})

    return r


def _cordon_route(r: APIRouter, core: Coordinator, action: str) -> None:
    on = action == "cordon"

    @r.post(f"/workers/{{worker_id}}/{action}", tags=["workers"], operation_id=f"{action}Worker",
            response_model=WorkerInfo, responses=UNKNOWN_WORKER,
            summary="Keep a worker out of user jobs" if on else "Put a cordoned or failed worker back in service")
    async def cordon(worker_id: WorkerId) -> Response:
        with domain_errors():
            info = core.fleet.cordon(worker_id, on)
        await core.durable()
        return JSON(to_json(info))
