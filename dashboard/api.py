"""REST API under /api/v1: jobs, their results (JSON, CSV), logs and events (Server-Sent Events),
workers, the version.

Runs on the coordinator's asyncio loop and calls the Coordinator facade directly (the reads
excepted, where the app is served on the edge loop: `reads`, dashboard/reads.py), so every
endpoint is `async def` (a plain `def` would run in a thread, next to a domain that has no
locks). Bodies are `to_json` of the proto messages; domain errors become HTTP statuses through
ringleader.errors' catalog, InvalidSpec as FastAPI's 422 shape naming the field in `loc`.
"""

from __future__ import annotations

import contextlib
import math
import platform
from typing import Annotated, Any, AsyncIterator, Iterator, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute

import google.protobuf
import grpc

from ringleader.page_token import MAX_TOKEN
from coordinator.shell.facade import Coordinator
from coordinator.edge import usecases
from dashboard.job_docs import View, check_fits, job_doc, results_csv, summary
from dashboard.reads import CoreReads, Reads
from dashboard.schemas import (
    CancelIn, Error, Job, JobEvent, JobId, JobList, JobLogs, JobStateName, KindList, LeanJob, LiveEvent,
    ResultFormat, ResultList, VersionInfo, WorkerList, WorkerStateName, job_spec_model, json_safe, sse_response,
)
from dashboard.sse import LIVE_QUEUE, LiveFanout, aiter_list, last_event_id, sse_frame, with_keepalive
from ringleader import __version__, jobspec, kinds, states
from ringleader.defaults import PAGE_DEFAULT, PAGE_MAX
from ringleader.errors import InvalidSpec, NotFound, Overloaded, RingleaderError, answer
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

AGE_HEADER = "X-Read-View-Age-Ms"  # a read's staleness (dashboard/reads.py), also `read_view_age_ms` in its body
KEEPALIVE_S = 15.0  # a comment line after this much silence keeps proxies from closing a stream
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

AnyJob = LeanJob | Job  # ?view=lean (default) or full
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Error, "description": "No job with this id"}}
# Starlette answers 400 itself when a body cannot even be read as text (JSON that does not parse: 422).
UNPARSEABLE: dict[int | str, dict[str, Any]] = {400: {"model": Error, "description": "The body cannot be decoded"}}
# Calls that add work, while the coordinator is saturated (coordinator/core/load.py).
BUSY: dict[int | str, dict[str, Any]] = {429: {"model": Error, "description": "The coordinator is saturated: nothing "
                                               "was done; try again after the Retry-After header's seconds"}}


class JSON(JSONResponse):
    """A JSONResponse that cannot fail: what JSON cannot carry (a NaN, a lone surrogate that a
    request smuggled in as "\\ud800") is replaced rather than turned into a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # UnicodeEncodeError is one
            return super().render(json_safe(content))


class Route(APIRoute):
    """Renders 422s itself: FastAPI's handler echoes the offending input, and fails (500) when
    that input is a NaN or a lone surrogate. A 405's Allow lists every method of the path (one
    route per method: Starlette's would name only the route it tried), from `allow`, filled
    by `router` on a subclass of its own."""

    allow: dict[str, set[str]] = {}

    async def handle(self, scope, receive, send) -> None:
        if self.methods and scope["method"] not in self.methods:
            allow = self.allow.get(self.path) or self.methods
            raise HTTPException(405, headers={"Allow": ", ".join(sorted(allow))})
        await super().handle(scope, receive, send)

    def get_route_handler(self):
        handle = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            try:
                return await handle(request)
            except RequestValidationError as exc:
                return JSON({"detail": jsonable_encoder(exc.errors())}, status_code=422)

        return route_handler


def router(core: Coordinator, keepalive_s: float = KEEPALIVE_S, reads: Reads | None = None) -> APIRouter:
    """`reads`: where GET /jobs, /jobs/{id} and /workers are answered from (dashboard/reads.py;
    default: the facade, on the core loop)."""
    route_class = type("Route", (Route,), {"allow": {}})
    r = APIRouter(prefix="/api/v1", route_class=route_class)
    reads = reads or CoreReads(core)
    _job_routes(r, core, reads)
    _one_job_routes(r, core, reads)
    _result_routes(r, core)
    _event_routes(r, core, keepalive_s)
    _worker_routes(r, reads)
    _kind_routes(r)
    _version_route(r)
    for route in r.routes:
        route_class.allow.setdefault(route.path, set()).update(route.methods)
    return r


def _job_routes(r: APIRouter, core: Coordinator, reads: Reads) -> None:
    @r.post("/jobs", tags=["jobs"], operation_id="submitJob", status_code=201, response_model=AnyJob,
            summary="Submit a job",
            description="Refused (422, world_size) when the connected workers cannot run it, unless `queue` is true.",
            responses={201: {"description": "The accepted job (QUEUED, or RUNNING if it was placed at once)"},
                       **UNPARSEABLE, **BUSY,
                       409: {"model": Error, "description": "`request_id` was used before, with another spec"}})
    async def submit_job(
        spec: job_spec_model(kinds.TABLE),  # type: ignore[valid-type]  # the table as of the router's build
        request_id: Annotated[str | None, Query(
            min_length=1, max_length=jobspec.MAX_REQUEST_ID, pattern=r"^[ -~]+$",
            description="idempotency key chosen by the client (printable ASCII, e.g. a UUID): a retry with the same "
                        "key returns the job the first request created (also across coordinator restarts); "
                        "with another spec: 409")] = None,
        view: View = "lean",
    ) -> Response:
        fits = None if spec.queue else (lambda: check_fits(core, spec.to_pb()))
        with domain_errors(conflicts=("request_id",)):  # a taken key conflicts with its first request
            job = await usecases.submit(core, spec.to_pb(), request_id or "", precheck=fits)
        return JSON(job_doc(job, view), status_code=201, headers={"Location": f"{r.prefix}/jobs/{job.id}"})

    @r.get("/jobs", tags=["jobs"], operation_id="listJobs", response_model=JobList, summary="List jobs",
           description="Newest first, without results. Page with `before` = the previous page's `next_before`.",
           responses={404: {"model": Error, "description": "`before` names no job"}})
    async def list_jobs(
        state: Annotated[list[JobStateName], Query(description="any of these states (repeat the parameter)")] = [],  # noqa: B006
        # Evaluated when the router is built (postponed annotations): the table's kinds as of then.
        op: Annotated[Literal[kinds.listed_names()] | None, Query(  # type: ignore[valid-type]
            description="only jobs of this op (a collective sweep's) or this job kind (GET /api/v1/kinds)")] = None,
        limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
        before: Annotated[str | None, Query(max_length=128, description="only jobs submitted before this job id")] = None,
        view: View = "lean",
    ) -> Response:
        wanted = [pb.JobState.Value(s) for s in state]
        try:
            page, age = await reads.list_jobs(wanted, op or "", limit, before or "")
        except NotFound as exc:  # the page it continues is gone: like a path naming no job
            raise HTTPException(404, f"before: {exc}") from None
        return JSON({"jobs": [job_doc(j, view, results=False) for j in page.jobs],
                     "next_before": page.next_before or None, "read_view_age_ms": age},
                    headers={AGE_HEADER: str(age)})


def _one_job_routes(r: APIRouter, core: Coordinator, reads: Reads) -> None:
    @r.get("/jobs/{job_id}", tags=["jobs"], operation_id="getJob", response_model=AnyJob,
           summary="Get a job with its results", responses=NOT_FOUND)
    async def get_job(job_id: JobId, view: View = "lean") -> Response:
        with domain_errors():
            job = await reads.get_job(job_id)
            return JSON(job_doc(job, view), headers={AGE_HEADER: str(job.read_view_age_ms)})

    @r.post("/jobs/{job_id}/cancel", tags=["jobs"], operation_id="cancelJob", response_model=AnyJob,
            summary="Cancel a queued or running job",
            responses={**NOT_FOUND, **UNPARSEABLE, 409: {"model": Error, "description": "The job has already finished"}})
    async def cancel_job(job_id: JobId, body: Annotated[CancelIn | None, Body()] = None,
                         view: View = "lean") -> Response:
        with domain_errors():
            job = await usecases.cancel(core, job_id, body.reason if body else "")
        return JSON(job_doc(job, view))


def _result_routes(r: APIRouter, core: Coordinator) -> None:
    @r.get("/jobs/{job_id}/results", tags=["jobs"], operation_id="getJobResults", response_model=ResultList,
           summary="A job's results, one row per size (JSON or CSV)",
           responses={**NOT_FOUND, 200: {"description": "JSON, or CSV with a header row of the field names",
                                         "content": {"text/csv": {"schema": {"type": "string"}}}}})
    async def get_results(job_id: JobId, format: Annotated[ResultFormat, Query()] = "json") -> Response:  # noqa: A002
        with domain_errors():
            job = core.get(job_id)
        if format == "csv":
            return Response(results_csv(job.results), media_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{job.id}.csv"'})
        return JSON({"results": [to_json(res) for res in job.results]})

    @r.get("/jobs/{job_id}/logs", tags=["jobs"], operation_id="getJobLogs", response_model=JobLogs,
           summary="Each rank's executor stderr captured during the job",
           description="Every rank the job was placed on, in rank order; `received` is false until the "
                       "rank reports its end. `text` is the last 64 KiB, with a first line saying how much "
                       "was dropped, and a line from the worker when the executor died or was replaced.",
           responses=NOT_FOUND)
    async def get_logs(job_id: str) -> Response:
        with domain_errors():
            return JSON(to_json(core.job_logs(job_id)))


def _event_routes(r: APIRouter, core: Coordinator, keepalive_s: float) -> None:
    live = LiveFanout(summary)
    core.add_listener(live.publish)

    @r.get("/jobs/{job_id}/events", tags=["events"], operation_id="watchJob", response_class=StreamingResponse,
           summary="Follow a job: its stored events, then live ones, until it finishes",
           responses={**NOT_FOUND, **sse_response(
               "Server-Sent Events; `event:` state, progress or result; `id:` the event's seq (absent for "
               "progress); `data:` the JobEvent as JSON. The stream ends after the terminal state.",
               JobEvent, with_id=True),
               204: {"description": "Reconnected (Last-Event-ID) to a finished job with nothing left to send"}})
    async def watch_job(job_id: JobId, request: Request) -> Response:
        with domain_errors():
            job = core.get(job_id)
        after = last_event_id(request.headers.get("last-event-id"))
        frames: AsyncIterator[str] = job_frames(core, job_id, after)
        if after is not None and states.is_terminal(job.state):
            # An EventSource reconnects when a stream ends; 204 is how it is told to stop.
            sent = [f async for f in frames]
            if not sent:
                return Response(status_code=204)
            frames = aiter_list(sent)
        return StreamingResponse(with_keepalive(frames, keepalive_s), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    @r.get("/events", tags=["events"], operation_id="watchAll", response_class=StreamingResponse,
           summary="Every job's events as they happen (the live queue)",
           responses=sse_response(
               "Server-Sent Events; `event:` state, progress or result; `data:` "
               '{"event": the JobEvent, "job": the Job without results}. A client that falls '
               f"{LIVE_QUEUE} events behind is disconnected: on reconnecting, list the jobs again.",
               LiveEvent, with_id=False))
    async def watch_all() -> Response:
        return StreamingResponse(with_keepalive(live.frames(), keepalive_s), media_type="text/event-stream",
                                 headers=SSE_HEADERS)


def _worker_routes(r: APIRouter, reads: Reads) -> None:
    @r.get("/workers", tags=["workers"], operation_id="listWorkers", response_model=WorkerList,
           summary="Connected and recently disconnected workers",
           description="In (host, device index, worker id) order. Page with `page_token` = the previous page's "
                       "`next_page_token`. A worker disconnected for longer than the coordinator's --worker-ttl "
                       "is no longer listed.",
           responses={404: {"model": Error, "description": "`page_token` is no page of this listing"}})
    async def list_workers(
        state: Annotated[list[WorkerStateName], Query(description="any of these states (repeat the parameter)")] = [],  # noqa: B006
        limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
        page_token: Annotated[str | None, Query(max_length=MAX_TOKEN)] = None,
    ) -> Response:
        wanted = [pb.WorkerState.Value(s) for s in state]
        try:
            workers, token, age = await reads.list_workers(wanted, limit, page_token or "")
        except InvalidSpec as exc:  # a token this listing never issued names no page of it
            raise HTTPException(404, str(exc)) from None
        return JSON({"workers": [to_json(w) for w in workers], "next_page_token": token or None,
                     "read_view_age_ms": age}, headers={AGE_HEADER: str(age)})


def _kind_routes(r: APIRouter) -> None:
    body = {"kinds": [{"name": k.name, "listed_as": list(k.listed_as), "result": k.result} for k in kinds.TABLE]}

    @r.get("/kinds", tags=["meta"], operation_id="listKinds", response_model=KindList,
           summary="The job kinds this coordinator runs (the table the UI and the filters read)")
    async def list_kinds() -> Response:
        return JSON(body)


def _version_route(r: APIRouter) -> None:
    body = VersionInfo(version=__version__, api_version="v1", python=platform.python_version(),
                       grpc=grpc.__version__, protobuf=google.protobuf.__version__).model_dump()

    @r.get("/version", tags=["meta"], operation_id="getVersion", response_model=VersionInfo,
           summary="The coordinator's version and its API's")
    async def get_version() -> Response:
        return JSON(body)


# ---- helpers -------------------------------------------------------------------------------


@contextlib.contextmanager
def domain_errors(conflicts: tuple[str, ...] = ()) -> Iterator[None]:
    """Domain errors as HTTP answers: InvalidSpec as a 422 naming the field (409 for the fields
    in `conflicts`), the others by the catalog."""
    try:
        yield
    except InvalidSpec as exc:
        if exc.field in conflicts:
            raise HTTPException(409, str(exc)) from None
        raise validation_error(("body", *exc.field.split(".")), exc.message) from None
    except Overloaded as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(math.ceil(exc.retry_after_s))}) from None
    except RingleaderError as exc:
        raise HTTPException(answer(exc).http_status, str(exc)) from None


def validation_error(loc: tuple[str, ...], msg: str) -> RequestValidationError:
    """The 422 FastAPI sends for invalid requests, for an error only the domain can see."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": msg}])


async def job_frames(core: Coordinator, job_id: str, after: int | None) -> AsyncIterator[str]:
    async with contextlib.aclosing(core.watch(job_id)) as events:
        async for event in events:
            if after is not None and event.seq and event.seq <= after:
                continue  # the client saw it before it reconnected
            yield sse_frame(event, to_json(event))
