"""REST routes of baselines and localization (docs/baselines.md), under /api/v1:

    GET  /baselines                 the baseline table
    POST /baselines/import          import entries (replaces those keys; all or nothing)
    POST /jobs/{job_id}/localize    find what makes the job's gang slow (runs test jobs; seconds)
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from coordinator.health import baselines, localizer
from coordinator.core.facade import Coordinator
from dashboard.api import JSON, NOT_FOUND, Route, domain_errors
from dashboard.schemas import Error, JobId, proto_model
from dashboard.spec_in import Text
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

BaselineTable = proto_model(pb.BaselineTable.DESCRIPTOR)
LocalizeResult = proto_model(pb.LocalizeResult.DESCRIPTOR)


class BaselineEntryIn(BaseModel):
    """One key's window of busbw results (its key and statistics are computed on import)."""

    model_config = ConfigDict(extra="forbid")
    gpu_model: Text(128)  # type: ignore[valid-type]
    op: Text(32)  # type: ignore[valid-type]
    dtype: Text(32)  # type: ignore[valid-type]
    size_bucket: int = Field(ge=0, le=1 << 62, description="a power of two: sizes in [bucket, 2 * bucket)")
    ranks: int = Field(ge=1, le=1 << 20)
    hosts: int = Field(ge=1, le=1 << 20)
    link: Text(8)  # type: ignore[valid-type]
    mode: Text(8) = "eager"  # type: ignore[valid-type]
    algo: Text(64) = ""  # type: ignore[valid-type]
    samples: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(min_length=1, max_length=baselines.WINDOW)


class BaselineTableIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[BaselineEntryIn] = Field(max_length=100_000)


class Imported(BaseModel):
    imported: int


def router(core: Coordinator) -> APIRouter:
    r = APIRouter(prefix="/api/v1", route_class=Route)

    @r.get("/baselines", tags=["baselines"], operation_id="exportBaselines", response_model=BaselineTable,
           summary="The baseline table (median and MAD of busbw per comparable key)")
    async def export_baselines() -> JSON:
        return JSON(to_json(baselines.export_table(core.store)))

    @r.post("/baselines/import", tags=["baselines"], operation_id="importBaselines", response_model=Imported,
           summary="Import baseline entries: replaces those keys (all or nothing)")
    async def import_baselines(table: BaselineTableIn) -> JSON:
        message = pb.BaselineTable(entries=[pb.BaselineEntry(**e.model_dump()) for e in table.entries])
        with domain_errors():
            n = baselines.import_table(core.store, message)
        await core.durable()
        return JSON({"imported": n})

    @r.post("/jobs/{job_id}/localize", tags=["jobs"], operation_id="localizeJob", response_model=LocalizeResult,
            summary="Find the worker, link or host that makes a finished collective job's gang slow",
            responses={**NOT_FOUND, 409: {"model": Error, "description": "Not a collective job that ran"}})
    async def localize_job(
        job_id: JobId,
        tolerance: Annotated[float, Query(gt=0, lt=1, description="slow: below this share of a clean group")] = 0.8,
        size_bytes: Annotated[int, Query(ge=0, le=1 << 40, description="test size (0: the job's largest)")] = 0,
    ) -> JSON:
        # Known-good padding is the idle workers outside the gang here (a list of ids would not fit
        # a URL at fleet scale); gRPC and the CLI take an explicit list.
        request = pb.LocalizeRequest(job_id=job_id, tolerance=tolerance, size_bytes=size_bytes)
        with domain_errors():
            return JSON(to_json(await localizer.localize(core, request)))

    return r
