"""REST route of worker identity under /api/v1: an operator approves a worker's re-claim of its id
without its secret (a replaced pod, a lost state dir; coordinator/edge/identity.py). The same call
as the gRPC RPC ApproveWorker; errors through dashboard/api.py's one mapping."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from coordinator.core.facade import Coordinator
from coordinator.edge.identity import WorkerIdentities
from dashboard.api import JSON, domain_errors
from dashboard.fleet_api import WorkerId
from dashboard.schemas import Error, proto_model
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

Approved = proto_model(pb.ApproveWorkerResponse.DESCRIPTOR)


def router(core: Coordinator, identities: WorkerIdentities) -> APIRouter:
    r = APIRouter(prefix="/api/v1")

    @r.post("/workers/{worker_id}/approve", tags=["workers"], operation_id="approveWorker",
            response_model=Approved, responses={409: {"model": Error, "description": "The worker is connected"}},
            summary="Let a worker re-claim its id without its secret (its next registration within the window)")
    async def approve(worker_id: WorkerId) -> Response:
        with domain_errors():
            answer = identities.approve_reclaim(core.workers, worker_id)
        return JSON(to_json(answer))

    return r
