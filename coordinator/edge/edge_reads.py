"""GetJob, ListJobs and ListWorkers answered on the edge loop from the read view
(coordinator/edge/read_view.py), never hopped to the core; and the other JobService calls' hop
made to hand the view their changes before they answer (read-your-writes)."""

from __future__ import annotations

import functools
import inspect
from typing import Callable

from coordinator.edge import identity
from coordinator.edge.read_feed import ReadFeed
from coordinator.edge.read_view import ReadView
from coordinator.edge.servicers import abort_with
from ringleader.errors import RingleaderError
from ringleader.v1 import jobs_pb2 as pb

READS = ("GetJob", "ListJobs", "ListWorkers")


class EdgeReads:
    """The read RPCs, on the edge loop: the same caller check and error statuses as the hopped
    ones (coordinator/edge/servicers.py's `guarded`)."""

    def __init__(self, view: ReadView) -> None:
        self.view = view

    async def GetJob(self, request, context):
        try:
            identity.caller_may_use_jobs(context)
            return await self.view.get_job(request.job_id)
        except RingleaderError as exc:
            await abort_with(context, exc)

    async def ListJobs(self, request, context):
        try:
            identity.caller_may_use_jobs(context)
            page, age = await self.view.list_jobs(request.states, request.op, request.limit, request.before_id)
        except RingleaderError as exc:
            await abort_with(context, exc)
        return pb.ListJobsResponse(jobs=page.jobs, next_before_id=page.next_before, read_view_age_ms=age)

    async def ListWorkers(self, request, context):
        try:
            identity.caller_may_use_jobs(context)
            workers, token, age = await self.view.list_workers(request.states, request.limit, request.page_token)
        except RingleaderError as exc:
            await abort_with(context, exc)
        return pb.ListWorkersResponse(workers=workers, next_page_token=token, read_view_age_ms=age)


def then_flush(method: Callable, feed: ReadFeed) -> Callable:
    """`method` (a servicer's, run on the core), then the feed's flush, before its answer leaves
    for the edge: the edge applies the view's update first. A worker write (cordon, uncordon,
    approve) needs no look at every worker: what it changes is in the health book, whose every
    new record touches its worker (registry.touch_id), and a flush sends the touched workers."""
    @functools.wraps(method)
    async def body(request, context):
        answer = method(request, context)
        if inspect.isawaitable(answer):
            answer = await answer
        feed.flush()
        return answer
    return body
