"""REST routes of worker identity under /api/v1: the daemons refused re-claiming an id, and an
operator's approval of one daemon's re-claim without its secret (a replaced pod, a lost state dir;
coordinator/edge/identity.py). The same calls as the gRPC RPCs ListPendingDaemons and
ApproveWorker (its use case, coordinator/edge/usecases.py); errors through dashboard/api.py's one mapping."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from coordinator.shell.facade import Coordinator
from coordinator.edge import usecases
from coordinator.edge.identity import WorkerIdentities
from dashboard.api import JSON, domain_errors
from dashboard.fleet_api import WorkerId
from dashboard.schemas import Error, proto_model
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

Approved = proto_model(pb.ApproveWorkerResponse.DESCRIPTOR)
Pending = proto_model(pb.ListPendingDaemonsResponse.DESCRIPTOR)


def router(core: Coordinator, identities: WorkerIdentities) -> APIRouter:
    r = APIRouter(prefix="/api/v1")

    @r.post("/workers/{worker_id}/approve", tags=["workers"], operation_id="approveWorker",
            response_model=Approved, responses={409: {"model": Error, "description": "The worker is connected"}},
            summary="Let a worker re-claim its id without its secret (its next registration within the window)")
    async def approve(worker_id: WorkerId, credential_fingerprint: Annotated[str, Query(
            max_length=64, description="the daemon to admit (GET /api/v1/daemons/pending); empty: the only one "
                                       "waiting")] = "") -> Response:
        with domain_errors():
            answer = await usecases.approve_reclaim(core, identities, worker_id, credential_fingerprint)
        return JSON(to_json(answer))

    @r.get("/daemons/pending", tags=["workers"], operation_id="listPendingDaemons", response_model=Pending,
           summary="The daemons refused re-claiming a worker id without its secret, with their fingerprints")
    async def pending() -> Response:
        return JSON(to_json(identities.pending_daemons()))

    return r
