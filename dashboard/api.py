"""REST API under /api/v1: jobs, their results (JSON, CSV) and events (Server-Sent Events), workers.

Runs on the coordinator's asyncio loop and calls the Coordinator directly, so every endpoint is
`async def` (a plain `def` would run in a thread, next to a domain that has no locks). Bodies
are `to_json` of the proto messages; domain errors map to HTTP here, in one place:
InvalidSpec -> 422 (FastAPI's validation shape, naming the field), NotFound -> 404,
FailedPrecondition -> 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
from typing import Annotated, Any, AsyncIterator, Iterator

from fastapi import APIRouter, Body, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute

from coordinator.core import TERMINAL, Coordinator
from dashboard.schemas import (
    RESULT_FIELDS, CancelIn, Error, Job, JobList, JobSpecIn, JobStateName, OpName, ResultFormat,
    ResultList, WorkerList, json_safe,
)
from ringleader.errors import FailedPrecondition, InvalidSpec, NotFound
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

KEEPALIVE_S = 15.0  # a comment line after this much silence keeps proxies from closing a stream
LIVE_QUEUE = 1000  # events buffered per /api/v1/events client; a client this far behind is dropped
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Error, "description": "No job with this id"}}


def sse_response(description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description,
                  "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


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
    that input is a NaN or a lone surrogate."""

    def get_route_handler(self):
        handle = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            try:
                return await handle(request)
            except RequestValidationError as exc:
                return JSON({"detail": jsonable_encoder(exc.errors())}, status_code=422)

        return route_handler


def router(core: Coordinator, keepalive_s: float = KEEPALIVE_S) -> APIRouter:
    r = APIRouter(prefix="/api/v1", route_class=Route)
    live = LiveFanout()
    core.add_listener(live.publish)

    # ---- jobs ------------------------------------------------------------------------------

    @r.post("/jobs", tags=["jobs"], operation_id="submitJob", status_code=201, response_model=Job,
            summary="Submit a job",
            responses={201: {"description": "The accepted job (QUEUED, or RUNNING if it was placed at once)"}})
    async def submit_job(spec: JobSpecIn) -> Response:
        with domain_errors():
            job = core.submit(spec.to_pb())
        return JSON(to_json(job), status_code=201, headers={"Location": f"{r.prefix}/jobs/{job.id}"})

    @r.get("/jobs", tags=["jobs"], operation_id="listJobs", response_model=JobList, summary="List jobs",
           description="Newest first, without results. Page with `before` = the previous page's `next_before`.")
    async def list_jobs(
        state: Annotated[list[JobStateName], Query(description="any of these states (repeat the parameter)")] = [],  # noqa: B006
        op: Annotated[OpName | None, Query(description="only jobs of this collective op")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        before: Annotated[str | None, Query(max_length=128, description="only jobs submitted before this job id")] = None,
    ) -> Response:
        states = [pb.JobState.Value(s) for s in state]
        try:
            # One more than asked tells whether there is a next page.
            jobs = core.list(states=states, op=op or "", limit=min(limit + 1, 1000), before_id=before or "")
        except NotFound as exc:
            raise validation_error(("query", "before"), str(exc)) from None
        more = len(jobs) > limit or len(jobs) == 1000
        jobs = jobs[:limit]
        running = {j.id: j for j in core.running_jobs()}
        for job in jobs:
            if job.id in running:  # the store holds progress only as of the last state change
                job.progress.CopyFrom(running[job.id].progress)
        return JSON({"jobs": [summary(j) for j in jobs],
                     "next_before": jobs[-1].id if more and jobs else None})

    @r.get("/jobs/{job_id}", tags=["jobs"], operation_id="getJob", response_model=Job,
           summary="Get a job with its results", responses=NOT_FOUND)
    async def get_job(job_id: str) -> Response:
        with domain_errors():
            return JSON(to_json(core.get(job_id)))

    @r.post("/jobs/{job_id}/cancel", tags=["jobs"], operation_id="cancelJob", response_model=Job,
            summary="Cancel a queued or running job",
            responses={**NOT_FOUND, 409: {"model": Error, "description": "The job has already finished"}})
    async def cancel_job(job_id: str, body: Annotated[CancelIn | None, Body()] = None) -> Response:
        with domain_errors():
            return JSON(to_json(core.cancel(job_id, body.reason if body else "")))

    @r.get("/jobs/{job_id}/results", tags=["jobs"], operation_id="getJobResults", response_model=ResultList,
           summary="A job's results, one row per size (JSON or CSV)",
           responses={**NOT_FOUND, 200: {"description": "JSON, or CSV with a header row of the field names",
                                         "content": {"text/csv": {"schema": {"type": "string"}}}}})
    async def get_results(job_id: str, format: Annotated[ResultFormat, Query()] = "json") -> Response:  # noqa: A002
        with domain_errors():
            job = core.get(job_id)
        if format == "csv":
            return Response(results_csv(job.results), media_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{job.id}.csv"'})
        return JSON({"results": [to_json(res) for res in job.results]})

    @r.get("/jobs/{job_id}/events", tags=["events"], operation_id="watchJob", response_class=StreamingResponse,
           summary="Follow a job: its stored events, then live ones, until it finishes",
           responses={**NOT_FOUND, **sse_response(
               "Server-Sent Events; `event:` state, progress or result; `id:` the event's seq (absent for "
               "progress); `data:` the JobEvent as JSON. The stream ends after the terminal state."),
               204: {"description": "Reconnected (Last-Event-ID) to a finished job with nothing left to send"}})
    async def watch_job(job_id: str, request: Request) -> Response:
        with domain_errors():
            job = core.get(job_id)
        after = last_event_id(request.headers.get("last-event-id"))
        frames: AsyncIterator[str] = job_frames(core, job_id, after)
        if after is not None and job.state in TERMINAL:
            # An EventSource reconnects when a stream ends; 204 is how it is told to stop.
            sent = [f async for f in frames]
            if not sent:
                return Response(status_code=204)
            frames = aiter_list(sent)
        return StreamingResponse(with_keepalive(frames, keepalive_s), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    # ---- everything live -------------------------------------------------------------------

    @r.get("/events", tags=["events"], operation_id="watchAll", response_class=StreamingResponse,
           summary="Every job's events as they happen (the live queue)",
           responses=sse_response(
               "Server-Sent Events; `event:` state, progress or result; `data:` "
               '{"event": the JobEvent, "job": the Job without results}. A client that falls '
               f"{LIVE_QUEUE} events behind is disconnected: on reconnecting, list the jobs again."))
    async def watch_all() -> Response:
        return StreamingResponse(with_keepalive(live.frames(), keepalive_s), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    # ---- workers ---------------------------------------------------------------------------

    @r.get("/workers", tags=["workers"], operation_id="listWorkers", response_model=WorkerList,
           summary="Connected and recently disconnected workers")
    async def list_workers() -> Response:
        return JSON({"workers": [to_json(w) for w in core.list_workers()]})

    return r


# ---- helpers -------------------------------------------------------------------------------


@contextlib.contextmanager
def domain_errors() -> Iterator[None]:
    try:
        yield
    except InvalidSpec as exc:
        raise validation_error(("body", *exc.field.split(".")), exc.message) from None
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except FailedPrecondition as exc:
        raise HTTPException(409, str(exc)) from None


def validation_error(loc: tuple[str, ...], msg: str) -> RequestValidationError:
    """The 422 FastAPI sends for invalid requests, for an error only the domain can see."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": msg}])


def summary(job: pb.Job) -> dict:
    body = to_json(job)
    body.pop("results", None)
    return body


def results_csv(results) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(RESULT_FIELDS)
    for res in results:
        writer.writerow([csv_value(getattr(res, f)) for f in RESULT_FIELDS])
    return out.getvalue()


def csv_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def sse_frame(event: pb.JobEvent, data: dict, with_id: bool = True) -> str:
    lines = [f"event: {event.WhichOneof('event') or 'message'}"]
    if with_id and event.seq:  # progress events are not stored and have no seq
        lines.append(f"id: {event.seq}")
    lines.append("data: " + json.dumps(json_safe(data), separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


def last_event_id(header: str | None) -> int | None:
    try:
        return int(header) if header else None
    except ValueError:
        return None


async def job_frames(core: Coordinator, job_id: str, after: int | None) -> AsyncIterator[str]:
    async with contextlib.aclosing(core.watch(job_id)) as events:
        async for event in events:
            if after is not None and event.seq and event.seq <= after:
                continue  # the client saw it before it reconnected
            yield sse_frame(event, to_json(event))


async def aiter_list(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


async def with_keepalive(source: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """`source`, with a comment line whenever it is silent for `interval` seconds."""

    async def step() -> tuple[bool, str]:
        try:
            return True, await anext(source)
        except StopAsyncIteration:
            return False, ""

    pending: asyncio.Task | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(step())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield ": keep-alive\n\n"
                continue
            more, item = pending.result()
            pending = None
            if not more:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        await source.aclose()  # type: ignore[attr-defined]


class LiveFanout:
    """One Coordinator listener that copies every event to each connected client's queue."""

    def __init__(self, maxsize: int = LIVE_QUEUE) -> None:
        self.maxsize = maxsize
        self.clients: set[asyncio.Queue] = set()

    def publish(self, event: pb.JobEvent, job: pb.Job) -> None:
        if not self.clients:
            return
        frame = sse_frame(event, {"event": to_json(event), "job": summary(job)}, with_id=False)
        for q in list(self.clients):
            try:
                q.put_nowait(frame)
            except asyncio.QueueFull:  # too slow: drop it rather than buffer without bound
                self.clients.discard(q)
                while not q.empty():
                    q.get_nowait()
                q.put_nowait(None)

    async def frames(self) -> AsyncIterator[str]:
        q: asyncio.Queue = asyncio.Queue(self.maxsize)
        self.clients.add(q)
        try:
            yield ": listening\n\n"  # the client knows from here on that it misses nothing
            while (frame := await q.get()) is not None:
                yield frame
        finally:
            self.clients.discard(q)
