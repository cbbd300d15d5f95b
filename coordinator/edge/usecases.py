"""The write use cases both doors call (gRPC, coordinator/edge/servicers.py and watch.py, and
REST, dashboard/*_api.py): each is the whole sequence of one write, written once. A use case
takes the parsed request and what the door knows of the caller, checks what either door used to
check alone (the stricter of the two), and returns the answer or raises ringleader.errors' typed
errors; each door maps them to its status through the one catalog (`ringleader.errors.answer`).
Who may call is the door's (its guard runs first). A write's answer waits for its durable commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from coordinator.shell.facade import Coordinator
from coordinator.edge.identity import WorkerIdentities
from coordinator.health import baseline_io, localizer, sweeper
from ringleader import jobspec
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

CHECK_WORKERS_MAX = 65536  # worker ids one RunCheck may name
FINGERPRINT_MAX = 64  # a credential fingerprint: sha256, hex
LOCALIZE_SIZE_MAX = 1 << 40  # a localization's test size (bytes per rank)
BASELINE_ENTRIES_MAX = 100_000  # entries one import may carry


async def submit(core: Coordinator, spec: pb.JobSpec, request_id: str,
                 precheck: Callable[[], None] | None = None,
                 accepted: Callable[[pb.Job], Callable[[], None]] | None = None) -> pb.Job:
    """Submit a job and answer only once it is stored: refused at once while the coordinator is
    saturated, then `precheck` (a door's own refusal, e.g. REST's fleet-fit check; the gRPC
    client checks that itself), the request id's earlier job fetched, the core's submit, the
    durable commit, and the re-read (RUNNING if it was placed at once). `accepted` is called with
    the job in the submit's own turn of the core, before the commit (SubmitAndWatchJob registers
    its watch there, so no event falls between the two); what it returns undoes it if the commit
    fails."""
    core.lag.check("submit")
    if precheck is not None:
        precheck()
    await core.prefetch(request_id=request_id)
    job = core.submit(spec, request_id)  # a preflight is checked at placement
    undo = accepted(job) if accepted is not None else None
    try:
        await core.durable(at_once=True)  # acknowledged only once stored
    except BaseException:
        if undo is not None:
            undo()
        raise
    return core.get(job.id)  # RUNNING if it started (coordinator/shell/facade.py's submit says when)


async def cancel(core: Coordinator, job_id: str, reason: str) -> pb.Job:
    """Cancel a queued or running job, answered once the cancel is stored."""
    await core.prefetch(job_id=job_id)
    job = core.cancel(job_id, reason)
    await core.durable(at_once=True)
    return job


async def run_check(core: Coordinator, request: pb.RunCheckRequest) -> pb.RunCheckResponse:
    """Run fleet health checks now (coordinator/health/sweeper.py's run_check). The named
    workers and host are bounded as REST's body model bounds them: a worker id too long to be
    any worker's is an invalid field, not an unknown worker."""
    if len(request.worker_ids) > CHECK_WORKERS_MAX:
        raise InvalidSpec("worker_ids", f"at most {CHECK_WORKERS_MAX} workers, got {len(request.worker_ids)}")
    for i, worker_id in enumerate(request.worker_ids):
        jobspec.check_text(f"worker_ids.{i}", worker_id)
    jobspec.check_text("host", request.host)
    core.lag.check("run checks")
    return await sweeper.run_check(core, core.fleet, request)


async def cordon(core: Coordinator, worker_id: str, on: bool, force: bool = False) -> pb.WorkerInfo:
    """Cordon a worker (keep it out of user jobs) or uncordon it (`force`: without the recheck a
    worker whose latest verdict failed otherwise gets first); answered once stored. The core
    checks the id."""
    info = core.fleet.cordon(worker_id, on, force and not on)
    await core.durable(at_once=True)
    return info


async def approve_return(core: Coordinator, worker_id: str) -> pb.WorkerInfo:
    """Let a worker quarantined too often back after a passed validation; answered once stored."""
    info = core.fleet.approve_return(worker_id)
    await core.durable(at_once=True)
    return info


async def approve_reclaim(core: Coordinator, identities: WorkerIdentities, worker_id: str,
                          fingerprint: str) -> pb.ApproveWorkerResponse:
    """Let a daemon re-claim a worker id without its secret (coordinator/edge/identity.py)."""
    if len(fingerprint) > FINGERPRINT_MAX:
        raise InvalidSpec("credential_fingerprint", f"at most {FINGERPRINT_MAX} characters, got {len(fingerprint)}")
    return identities.approve_reclaim(core.workers, worker_id, fingerprint)


async def localize(core: Coordinator, request: pb.LocalizeRequest) -> pb.LocalizeResult:
    """Find what makes a finished collective job's gang slow (coordinator/health/localizer.py)."""
    if request.size_bytes > LOCALIZE_SIZE_MAX:
        raise InvalidSpec("size_bytes", f"at most {LOCALIZE_SIZE_MAX} (1 TiB), got {request.size_bytes}")
    core.lag.check("localize")
    return await localizer.localize(core, request)


async def import_baselines(core: Coordinator,
                           table: pb.BaselineTable | Callable[[], Awaitable[pb.BaselineTable]]) -> int:
    """Import baseline entries (all or nothing), answered once stored. `table` may be a reader
    (REST's body): a saturated coordinator refuses before a large body is read and parsed."""
    core.lag.check("import baselines")
    if callable(table):
        table = await table()
    if len(table.entries) > BASELINE_ENTRIES_MAX:
        raise InvalidSpec("entries", f"at most {BASELINE_ENTRIES_MAX} entries, got {len(table.entries)}")
    # Validated off the loop and written in chunks: other calls go on meanwhile.
    return await baseline_io.import_table(core.store, table, core.durable)
