"""Thin gRPC servicers: each RPC calls one Coordinator method or one use case
(coordinator/edge/usecases.py, the writes REST calls too); domain errors become statuses
through ringleader.errors' catalog. Who may call is checked first (coordinator/edge/identity.py):
a worker's certificate never reaches the users' API, and a registration reaches the control core
only once its certificate, credential and address are the worker's own."""

from __future__ import annotations

import functools
import inspect
import logging
import math

import grpc


from coordinator.health import baseline_io

from coordinator.edge import identity, usecases
from coordinator.edge.identity import WorkerIdentities
from coordinator.shell.facade import Coordinator
from ringleader.defaults import PAGE_DEFAULT, PAGE_MAX
from ringleader.errors import Overloaded, RingleaderError, answer
from ringleader.grpc_options import RETRY_AFTER
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

log = logging.getLogger("ringleader.coordinator")


async def abort_with(context: grpc.aio.ServicerContext, exc: RingleaderError) -> None:
    """The one place where domain errors become gRPC statuses (a saturated coordinator's says
    when to try again: `retry-after` seconds, in the trailing metadata as in HTTP's header)."""
    if isinstance(exc, Overloaded):
        context.set_trailing_metadata(((RETRY_AFTER, str(math.ceil(exc.retry_after_s))),))
    await context.abort(getattr(grpc.StatusCode, answer(exc).grpc_code), str(exc))


def guarded():
    """The one guard of every JobService RPC: who may call (a worker's certificate never reaches
    the users' API, coordinator/edge/identity.py) and domain errors to statuses (`abort_with`).
    A write's rules (load shedding, its durable commit) are its use case's
    (coordinator/edge/usecases.py). It takes plain methods and coroutines (WatchJob, the one
    stream, is coordinator/edge/watch.py's)."""
    def wrap(method):
        @functools.wraps(method)
        async def unary(self, request, context):
            try:
                identity.caller_may_use_jobs(context)
                answer_ = method(self, request, context)
                if inspect.isawaitable(answer_):
                    answer_ = await answer_
            except RingleaderError as exc:
                await abort_with(context, exc)
            return answer_
        return unary

    return wrap


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(self, coordinator: Coordinator, identities: WorkerIdentities | None = None) -> None:
        self.c = coordinator
        self.identities = identities or WorkerIdentities(coordinator.store)

    @guarded()
    async def SubmitJob(self, request, context):
        return await usecases.submit(self.c, request.spec, request.request_id)

    @guarded()
    async def GetJob(self, request, context):
        await self.c.prefetch(job_id=request.job_id)
        return self.c.get(request.job_id)

    @guarded()
    async def ListJobs(self, request, context):
        page = await self.c.list_jobs_off_loop(states=request.states, op=request.op, limit=request.limit,
                                before_id=request.before_id)
        return pb.ListJobsResponse(jobs=page.jobs, next_before_id=page.next_before)

    @guarded()
    async def CancelJob(self, request, context):
        return await usecases.cancel(self.c, request.job_id, request.reason)

    @guarded()
    async def GetJobLogs(self, request, context):
        await self.c.prefetch(job_id=request.job_id)
        return self.c.job_logs(request.job_id)

    @guarded()
    def ListWorkers(self, request, context):
        page = self.c.list_workers(states=request.states, limit=request.limit, page_token=request.page_token)
        return pb.ListWorkersResponse(workers=page.workers, next_page_token=page.next_page_token)

    @guarded()
    async def CordonWorker(self, request, context):
        return await usecases.cordon(self.c, request.worker_id, True)

    @guarded()
    async def UncordonWorker(self, request, context):
        return await usecases.cordon(self.c, request.worker_id, False, request.force)

    @guarded()
    async def ApproveWorker(self, request, context):
        return await usecases.approve_reclaim(self.c, self.identities, request.worker_id, request.credential_fingerprint)

    @guarded()
    def ListPendingDaemons(self, request, context):
        return self.identities.pending_daemons()

    @guarded()
    async def ApproveWorkerReturn(self, request, context):
        return await usecases.approve_return(self.c, request.worker_id)

    @guarded()
    def HooksLog(self, request, context):
        return pb.HooksLogResponse(deliveries=self.c.store.hook_deliveries(min(request.limit or PAGE_DEFAULT, PAGE_MAX)))

    @guarded()
    def SweepPlan(self, request, context):
        return self.c.fleet.sweep_plan()

    @guarded()
    async def RunCheck(self, request, context):
        return await usecases.run_check(self.c, request)

    @guarded()
    async def Localize(self, request, context):
        return await usecases.localize(self.c, request)

    @guarded()
    def ExportBaselines(self, request, context):
        return baseline_io.export_page(self.c.store, request.page_token, request.limit)

    @guarded()
    async def ImportBaselines(self, request, context):
        return pb.ImportBaselinesResponse(imported=await usecases.import_baselines(self.c, request))
