"""A small synchronous client of the coordinator's JobService (what the CLI uses)."""

from __future__ import annotations

import grpc

from ringleader import defaults
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc


class Client:
    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout_s
        self._channel = grpc.insecure_channel(address)
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, spec: pb.JobSpec) -> pb.Job:
        return self._stub.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=self.timeout)

    def get(self, job_id: str) -> pb.Job:
        return self._stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=self.timeout)

    def list(self, states=(), op: str = "", limit: int = 0, before_id: str = "") -> pb.ListJobsResponse:
        return self._stub.ListJobs(pb.ListJobsRequest(states=states, op=op, limit=limit, before_id=before_id),
                                   timeout=self.timeout)

    def cancel(self, job_id: str, reason: str = "") -> pb.Job:
        return self._stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason=reason), timeout=self.timeout)

    def workers(self, states=()) -> list[pb.WorkerInfo]:
        """Every worker (in any of `states`; empty: all), page after page."""
        out: list[pb.WorkerInfo] = []
        token = ""
        while True:
            request = pb.ListWorkersRequest(states=states, limit=defaults.PAGE_MAX, page_token=token)
            page = self._stub.ListWorkers(request, timeout=self.timeout)
            out += page.workers
            token = page.next_page_token
            if not token:
                return out

    def logs(self, job_id: str) -> pb.JobLogs:
        return self._stub.GetJobLogs(pb.GetJobLogsRequest(job_id=job_id), timeout=self.timeout)

    def watch(self, job_id: str):
        """Events of a job until it finishes (no deadline: jobs can run for long)."""
        return self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id))
