"""REST routes of baselines and localization (docs/baselines.md), under /api/v1:

    GET  /baselines                 the baseline table, a page at a time (?page_token=, ?limit=)
    POST /baselines/import          import entries (replaces those keys; all or nothing)
    POST /jobs/{job_id}/localize    find what makes the job's gang slow (runs test jobs; seconds)
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from coordinator.health import baseline_io, baselines
from coordinator.shell.facade import Coordinator
from coordinator.edge import usecases
from dashboard.api import BUSY, JSON, NOT_FOUND, Route, domain_errors
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
    entries: list[BaselineEntryIn] = Field(max_length=100_000)  # ENTRIES_MAX


class Imported(BaseModel):
    imported: int


def table_schema() -> dict:
    """BaselineTableIn's schema with its entries inline (the route reads its body itself)."""
    schema = BaselineTableIn.model_json_schema()
    schema["properties"]["entries"]["items"] = BaselineEntryIn.model_json_schema()
    schema.pop("$defs", None)
    return schema


async def read_table(request: Request) -> pb.BaselineTable:
    return await parse_table(await request.body())


async def parse_table(body: bytes, chunk: int = 1000) -> pb.BaselineTable:
    """A request body as the table it holds, a 422 naming the field as FastAPI's own checks.
    Parsed entry by entry and checked a chunk at a time in a worker thread: a parser holds the
    interpreter for the whole of what it is given (a 17 MB body: seconds on a busy machine), so
    nothing is given it whole; the loop serves other calls between the chunks."""
    try:
        raw = await asyncio.to_thread(split_entries, body)
    except RecursionError:  # the stdlib parser recurses per level: 1,000 levels deep exhaust it
        raise HTTPException(400, "request body: JSON nested too deeply to parse") from None
    if raw is None:  # not the plain {"entries": [...]} shape: the model's checks say what is wrong
        raw = [await asyncio.to_thread(_checked, BaselineTableIn, body, ())]
        return pb.BaselineTable(entries=[pb.BaselineEntry(**e.model_dump()) for e in raw[0].entries])
    if len(raw) > ENTRIES_MAX:
        raise RequestValidationError([{"type": "too_long", "loc": ("body", "entries"),
                                       "msg": f"at most {ENTRIES_MAX} entries, got {len(raw)}"}])
    out = pb.BaselineTable()
    for start in range(0, len(raw), chunk):
        part = await asyncio.to_thread(_checked, _ENTRIES, raw[start:start + chunk], ("entries", start))
        out.entries.extend(pb.BaselineEntry(**e.model_dump()) for e in part)
    return out


ENTRIES_MAX = usecases.BASELINE_ENTRIES_MAX
_ENTRIES = TypeAdapter(list[BaselineEntryIn])
_DECODER = json.JSONDecoder()
_HEAD = re.compile(rb'\s*\{\s*"entries"\s*:\s*\[')
_WS = re.compile(r"\s*")


def split_entries(body: bytes) -> list | None:
    """The entries of a body {"entries": [...]}, each parsed on its own (None: another shape)."""
    if not _HEAD.match(body):
        return None
    try:
        text = body.decode()
        pos, out = _WS.match(text, _HEAD.match(body).end()).end(), []  # ASCII head: bytes = chars
        if text[pos] != "]":
            while True:
                item, pos = _DECODER.raw_decode(text, pos)
                out.append(item)
                pos = _WS.match(text, pos).end()
                if text[pos] == "]":
                    break
                if text[pos] != ",":
                    return None
                pos = _WS.match(text, pos + 1).end()
        pos = _WS.match(text, pos + 1).end()
        if text[pos] != "}" or text[pos + 1:].strip():
            return None
        return out
    except (ValueError, IndexError):  # bad JSON (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        return None


def _checked(model, data, at: tuple):
    """`data` checked by `model` (a pydantic model or TypeAdapter), errors located at `at`."""
    try:
        if isinstance(data, bytes):
            return model.model_validate_json(data)
        return model.validate_python(data)
    except ValidationError as exc:
        # What was sent is not echoed: it may be bytes that are not text (a 500 when encoded).
        errors = [{"type": e["type"], "loc": e["loc"], "msg": e["msg"]} for e in exc.errors(include_url=False)]
        if at:  # an entry's index in its chunk, as its index in the table
            errors = [{**e, "loc": (at[0], at[1] + e["loc"][0], *e["loc"][1:])} for e in errors]
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


def router(core: Coordinator) -> APIRouter:
    r = APIRouter(prefix="/api/v1", route_class=Route)

    @r.get("/baselines", tags=["baselines"], operation_id="exportBaselines", response_model=BaselineTable,
           summary="The baseline table (median and MAD of busbw per comparable key)")
    async def export_baselines(
        page_token: Annotated[str, Query(max_length=512, description="the key the previous page ended with")] = "",
        limit: Annotated[int, Query(ge=0, le=baseline_io.PAGE_LIMIT, description="entries per page (0: 2,000)")] = 0,
    ) -> JSON:
        page = baseline_io.export_page(core.store, page_token, limit)
        return JSON(await asyncio.to_thread(to_json, page))  # Python work: the loop goes on meanwhile

    @r.post("/baselines/import", tags=["baselines"], operation_id="importBaselines", response_model=Imported,
            summary="Import baseline entries: replaces those keys (all or nothing)",
            openapi_extra={"requestBody": {"required": True,
                                           "content": {"application/json": {"schema": table_schema()}}}},
            responses={413: {"model": Error, "description": "Body over 32 MiB"}, **BUSY,
                       # The body is read by the route itself: FastAPI's own 422, declared by hand.
                       422: {"description": "An entry refused, the field named", "content": {"application/json": {
                           "schema": {"$ref": "#/components/schemas/HTTPValidationError"}}}}})
    async def import_baselines(request: Request) -> JSON:
        # Parsed off the loop: 100,000 entries (17 MB) took seconds of JSON and model checks that
        # stalled every call. The body is bounded before it is read (dashboard/body_limit.py),
        # and read only once the use case has checked the load; then the same checks as gRPC's.
        with domain_errors():
            n = await usecases.import_baselines(core, lambda: read_table(request))
        return JSON({"imported": n})

    @r.post("/jobs/{job_id}/localize", tags=["jobs"], operation_id="localizeJob", response_model=LocalizeResult,
            summary="Find the worker, link or host that makes a finished collective job's gang slow",
            responses={**NOT_FOUND, **BUSY, 409: {"model": Error, "description": "Not a collective job that ran"}})
    async def localize_job(
        job_id: JobId,
        tolerance: Annotated[float, Query(gt=0, lt=1, description="slow: below this share of a clean group")] = 0.8,
        size_bytes: Annotated[int, Query(ge=0, le=1 << 40, description="test size (0: the job's largest)")] = 0,
    ) -> JSON:
        # Known-good padding is the idle workers outside the gang here (a list of ids would not fit
        # a URL at fleet scale); gRPC and the CLI take an explicit list.
        request = pb.LocalizeRequest(job_id=job_id, tolerance=tolerance, size_bytes=size_bytes)
        with domain_errors():
            return JSON(to_json(await usecases.localize(core, request)))

    return r
