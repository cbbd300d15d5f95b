"""A small synchronous client of the coordinator's JobService (what the CLI uses)."""

from __future__ import annotations

import os

from ringleader import defaults
from ringleader.security import ClientSecurity
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc


def coordinator_address(flag: str | None = None) -> str:
    return flag or os.environ.get(defaults.COORDINATOR_ENV) or defaults.COORDINATOR_ADDRESS


class Client:
    """`security`: the users' token and TLS settings (none: plain gRPC, no token)."""

    def __init__(self, address: str, timeout_s: float = 10.0, security: ClientSecurity | None = None) -> None:
        self.address = address
        self.timeout = timeout_s
        security = security or ClientSecurity()
        self._channel = security.channel(address)
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._auth = security.metadata

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, spec: pb.JobSpec) -> pb.Job:
        return self._stub.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=self.timeout, metadata=self._auth)

    def get(self, job_id: str) -> pb.Job:
        return self._stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=self.timeout, metadata=self._auth)

    def list(self, states=(), op: str = "", limit: int = 0, before_id: str = "") -> pb.ListJobsResponse:
        return self._stub.ListJobs(pb.ListJobsRequest(states=states, op=op, limit=limit, before_id=before_id),
                                   timeout=self.timeout, metadata=self._auth)

    def cancel(self, job_id: str, reason: str = "") -> pb.Job:
        return self._stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason=reason), timeout=self.timeout,
                                    metadata=self._auth)

    def workers(self) -> list[pb.WorkerInfo]:
        return list(self._stub.ListWorkers(pb.ListWorkersRequest(), timeout=self.timeout,
                                           metadata=self._auth).workers)

    def watch(self, job_id: str):
        """Events of a job until it finishes (no deadline: jobs can run for long)."""
        return self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id), metadata=self._auth)
