"""A small synchronous client of the coordinator's JobService (what the CLI uses)."""

from __future__ import annotations

from ringleader import defaults
from ringleader.leader import pick_leader
from ringleader.security import ClientSecurity
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc


class Client:
    """`security`: the users' token and TLS settings (none: plain gRPC, no token)."""

    def __init__(self, address: str, timeout_s: float = 10.0, security: ClientSecurity | None = None) -> None:
        self.timeout = timeout_s
        security = security or ClientSecurity()
        # Several coordinators ("a:1,b:1", one leading): talk to the leader (ringleader/leader.py).
        self.address = pick_leader(address, security.channel)
        self._channel = security.channel(self.address)
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

    def workers(self, states=()) -> list[pb.WorkerInfo]:
        """Every worker (in any of `states`; empty: all), page after page."""
        out: list[pb.WorkerInfo] = []
        token = ""
        while True:
            request = pb.ListWorkersRequest(states=states, limit=defaults.PAGE_MAX, page_token=token)
            page = self._stub.ListWorkers(request, timeout=self.timeout, metadata=self._auth)
            out += page.workers
            token = page.next_page_token
            if not token:
                return out

    def logs(self, job_id: str) -> pb.JobLogs:
        return self._stub.GetJobLogs(pb.GetJobLogsRequest(job_id=job_id), timeout=self.timeout, metadata=self._auth)

    def cordon(self, worker_id: str, on: bool = True, force: bool = False) -> pb.WorkerInfo:
        call = self._stub.CordonWorker if on else self._stub.UncordonWorker
        return call(pb.CordonRequest(worker_id=worker_id, force=force), timeout=self.timeout, metadata=self._auth)

    def approve(self, worker_id: str) -> pb.ApproveWorkerResponse:
        return self._stub.ApproveWorker(pb.ApproveWorkerRequest(worker_id=worker_id), timeout=self.timeout,
                                        metadata=self._auth)

    def run_check(self, request: pb.RunCheckRequest) -> pb.RunCheckResponse:
        """Fleet checks; with request.wait, the call lasts until they finish (or its timeout_s)."""
        timeout = self.timeout + ((request.timeout_s or 300.0) if request.wait else 0.0)
        return self._stub.RunCheck(request, timeout=timeout, metadata=self._auth)

    def watch(self, job_id: str):
        """Events of a job until it finishes (no deadline: jobs can run for long)."""
        return self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id), metadata=self._auth)

    def localize(self, request: pb.LocalizeRequest, timeout_s: float = 600.0) -> pb.LocalizeResult:
        """Runs test jobs round after round: a longer deadline than the other calls."""
        return self._stub.Localize(request, timeout=timeout_s, metadata=self._auth)

    def export_baselines(self) -> pb.BaselineTable:
        """The whole table, asked for page by page (each answer stays under the message limit)."""
        table, token = pb.BaselineTable(), ""
        while True:
            page = self._stub.ExportBaselines(pb.ExportBaselinesRequest(page_token=token), timeout=self.timeout,
                                              metadata=self._auth)
            table.entries.extend(page.entries)
            if not (token := page.next_page_token):
                return table

    def import_baselines(self, table: pb.BaselineTable) -> pb.ImportBaselinesResponse:
        return self._stub.ImportBaselines(table, timeout=self.timeout, metadata=self._auth)
