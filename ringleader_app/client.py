"""A small synchronous client of the coordinator's JobService (what the CLI uses)."""

from __future__ import annotations

import time

import grpc

from ringleader import defaults
from ringleader.grpc_options import RETRY_AFTER
from ringleader.leader import pick_leader
from ringleader.security import ClientSecurity
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc


BUSY_TRIES = 3  # a saturated coordinator's refusal is tried again this many times in all
BUSY_WAIT_MAX_S = 10.0


def retry_after_s(exc: grpc.RpcError) -> float | None:
    """The seconds a saturated coordinator asked us to wait (None: not that refusal)."""
    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in exc.trailing_metadata() or ():
        if key == RETRY_AFTER:
            try:
                return min(BUSY_WAIT_MAX_S, max(0.0, float(value)))
            except ValueError:
                return None
    return None  # a message over the size limit: trying again would not help


class Client:
    """`security`: the users' token and TLS settings (none: plain gRPC, no token). Calls that add
    work (submit, checks) are tried again when a saturated coordinator refused them (it did
    nothing: RESOURCE_EXHAUSTED with retry-after), at most BUSY_TRIES times in all."""

    def __init__(self, address: str, timeout_s: float = 10.0, security: ClientSecurity | None = None,
                 busy_tries: int = BUSY_TRIES) -> None:
        self.timeout = timeout_s
        self.busy_tries = busy_tries
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

    def _patiently(self, call, *args, **kwargs):
        for attempt in range(1, self.busy_tries + 1):
            try:
                return call(*args, **kwargs)
            except grpc.RpcError as exc:
                wait = retry_after_s(exc)
                if wait is None or attempt == self.busy_tries:
                    raise
                time.sleep(wait)

    def submit(self, spec: pb.JobSpec) -> pb.Job:
        return self._patiently(self._stub.SubmitJob, pb.SubmitJobRequest(spec=spec), timeout=self.timeout,
                               metadata=self._auth)

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

    def approve(self, worker_id: str, fingerprint: str = "") -> pb.ApproveWorkerResponse:
        return self._stub.ApproveWorker(pb.ApproveWorkerRequest(worker_id=worker_id, credential_fingerprint=fingerprint),
                                        timeout=self.timeout, metadata=self._auth)

    def pending_daemons(self) -> pb.ListPendingDaemonsResponse:
        return self._stub.ListPendingDaemons(pb.ListPendingDaemonsRequest(), timeout=self.timeout, metadata=self._auth)

    def approve_return(self, worker_id: str) -> pb.WorkerInfo:
        return self._stub.ApproveWorkerReturn(pb.ValidateApproveReturnRequest(worker_id=worker_id),
                                              timeout=self.timeout, metadata=self._auth)

    def sweep_plan(self) -> pb.SweepPlanResponse:
        return self._stub.SweepPlan(pb.SweepPlanRequest(), timeout=self.timeout, metadata=self._auth)

    def hooks_log(self, limit: int = 0) -> pb.HooksLogResponse:
        return self._stub.HooksLog(pb.HooksLogRequest(limit=limit), timeout=self.timeout, metadata=self._auth)

    def run_check(self, request: pb.RunCheckRequest) -> pb.RunCheckResponse:
        """Fleet checks; with request.wait, the call lasts until they finish (or its timeout_s)."""
        timeout = self.timeout + ((request.timeout_s or 300.0) if request.wait else 0.0)
        return self._patiently(self._stub.RunCheck, request, timeout=timeout, metadata=self._auth)

    def watch(self, job_id: str):
        """Events of a job until it finishes (no deadline: jobs can run for long)."""
        return self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id), metadata=self._auth)

    def submit_and_watch(self, spec: pb.JobSpec, request_id: str = ""):
        """SubmitJob and WatchJob in one call (no deadline: jobs can run for long): yields the
        acknowledged job (stored), then each of its events; it ends with the terminal state."""
        updates = self._stub.SubmitAndWatchJob(pb.SubmitJobRequest(spec=spec, request_id=request_id),
                                               metadata=self._auth)
        for update in updates:
            yield update.accepted if update.WhichOneof("update") == "accepted" else update.event

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
