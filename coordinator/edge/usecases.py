"""The write use cases both doors call (gRPC, coordinator/edge/servicers.py, and REST,
dashboard/api.py): each is the whole acknowledgement sequence of one write, written once. A use
case raises ringleader.errors' typed errors; each door maps them to its status through the one
catalog (`ringleader.errors.answer`). Who may call is the door's (its guard runs first)."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.core.facade import Coordinator
from ringleader.v1 import jobs_pb2 as pb


async def submit(core: Coordinator, spec: pb.JobSpec, request_id: str,
                 precheck: Callable[[], None] | None = None) -> pb.Job:
    """Submit a job and answer only once it is stored: refused at once while the coordinator is
    saturated, then `precheck` (a door's own refusal, e.g. REST's fleet-fit check; the gRPC
    client checks that itself), the request id's earlier job fetched, the core's submit, the
    durable commit, and the re-read (RUNNING if it was placed at once)."""
    core.lag.check("submit")
    if precheck is not None:
        precheck()
    await core.prefetch(request_id=request_id)
    job = core.submit(spec, request_id)  # a preflight is checked at placement
    await core.durable(at_once=True)  # acknowledged only once stored
    return core.get(job.id)  # RUNNING if it started (coordinator/core/facade.py's submit says when)


async def cancel(core: Coordinator, job_id: str, reason: str) -> pb.Job:
    """Cancel a queued or running job, answered once the cancel is stored."""
    await core.prefetch(job_id=job_id)
    job = core.cancel(job_id, reason)
    await core.durable(at_once=True)
    return job
