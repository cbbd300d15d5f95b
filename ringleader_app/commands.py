"""The client commands of the CLI: submit, jobs, job, watch, cancel, logs, workers (over gRPC).

Each prints a table (`-o wide`: more columns), or with `-o json|yaml` one document on stdout
(progress goes to stderr).
"""

from __future__ import annotations

import argparse
import sys

from ringleader import fleet_fit, jobspec, kinds
from ringleader_app import listing, table
from ringleader_app.client import Client
from ringleader_app.follow import follow, follow_logs
from ringleader_app.render import dump
from ringleader_app.security_flags import client_security
from ringleader_app.submit_args import world_size
from ringleader.jsonview import to_json
from ringleader.errors import EXIT_FAILED, InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

__all__ = ["run_client_command", "spec_from_args"]


def spec_from_args(a: argparse.Namespace) -> pb.JobSpec:
    worker_ids = [w for w in a.workers.split(",") if w]
    spec = pb.JobSpec(world_size=world_size(a), priority=a.priority, name=a.name, op_timeout_s=a.op_timeout,
                      queue_timeout_s=a.queue_timeout or 0.0,
                      placement=pb.Placement(host=a.host, gpu_model=a.gpu_model, worker_ids=worker_ids,
                                             device_type=a.device_type))
    kind = kinds.by_cli_name(a.kind)
    getattr(spec, kind.name).CopyFrom(kind.resolve("from_args")(a))  # the kind's flags (ringleader_app/kindargs.py)
    return spec


def show_job(job: pb.Job, output: str) -> None:
    if output in ("json", "yaml"):
        print(dump(table.job_doc(job), output))
        return
    print(table.job_line(job))
    if job.workers:
        print("workers: " + ", ".join(f"{w.rank}={w.worker_id}" for w in job.workers)
              + f" ({job.backend}{', warm' if job.warm_start else ''})")
    outcome = table.outcome_table(job)
    if outcome:
        print(outcome)


def cmd_submit(a, client: Client) -> int:
    spec = spec_from_args(a)
    valid = jobspec.normalize(spec)  # the same checks as the coordinator, before any network call
    if idle := idle_ranks(valid):
        print(f"ringleader submit: warning: {idle}", file=sys.stderr)
    if not a.queue:
        fleet_fit.check(valid, client.workers(), "add --queue to queue it until they can (--queue-timeout to bound "
                                                 "the wait)")
    job = client.submit(spec)
    if not a.wait:
        if a.output in ("json", "yaml"):
            show_job(job, a.output)
        else:
            print(job.id)
        return 0
    return _finish(client, job.id, a.output, progress=sys.stderr)


def idle_ranks(valid: jobspec.ValidJob) -> str:
    """Why some ranks of a job would do nothing ("" when all work): a p2p job without --pairwise
    measures its first pair only."""
    used = {r for pair in valid.pairs for r in pair}
    n = valid.world_size
    if valid.spec.HasField("p2p") and used and len(used) < n:
        return (f"p2p without --pairwise measures ranks {' and '.join(map(str, sorted(used)))} only; "
                f"{n - len(used)} of {n} ranks stay idle: add --pairwise for every pair, or --world-size {len(used)}")
    return ""


def _finish(client: Client, job_id: str, output: str, progress) -> int:
    """Follow a job to its end, then show it; the exit code says whether it succeeded."""
    job = follow(client, job_id, out=progress)
    show_job(job, output)
    return 0 if job.state == pb.SUCCEEDED else EXIT_FAILED


def cmd_jobs(a, client: Client) -> int:
    page = client.list(states=[pb.JobState.Value(s) for s in a.state], op=a.op, limit=a.limit)
    listing.group_probes(page.jobs, keep=a.probes)
    if a.output in ("json", "yaml"):
        print(dump(table.jobs_doc(page), a.output))
    else:
        print(listing.jobs_table(page.jobs, wide=a.output == "wide"))
    return 0


def cmd_workers(a, client: Client) -> int:
    workers = client.workers()
    if a.output in ("json", "yaml"):
        print(dump(table.workers_doc(workers), a.output))
    else:
        print(listing.workers_table(workers, wide=a.output == "wide"))
        refused = _refused_daemons(client)
        if refused:
            print(refused)
    return 0


def _refused_daemons(client: Client) -> str:
    """The daemons refused re-claiming an id, and the command that admits each ("" when none)."""
    import grpc

    from ringleader_app.check_cmds import pending_text

    try:
        pending = client.pending_daemons()
    except grpc.RpcError as exc:  # a coordinator from before ListPendingDaemons
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return ""
        raise
    if not pending.daemons:
        return ""
    return "\nRefused: these daemons register a worker id bound to another daemon's credential.\n" + pending_text(pending)


def cmd_logs(a, client: Client) -> int:
    logs = follow_logs(client, a.job_id) if a.follow else client.logs(a.job_id)
    if a.rank is not None:
        ranks = [r for r in logs.ranks if r.rank == a.rank]
        if not ranks:
            raise InvalidSpec("--rank", f"job {a.job_id} has no rank {a.rank} "
                                      f"(ranks: {', '.join(str(r.rank) for r in logs.ranks) or 'none'})")
        del logs.ranks[:]
        logs.ranks.extend(ranks)
    print(dump(to_json(logs), a.output) if a.output in ("json", "yaml") else table.logs_text(logs))
    return 0


def run_client_command(a) -> int:
    with Client(a.coordinator, security=client_security(a)) as client:
        if a.command == "submit":
            return cmd_submit(a, client)
        if a.command == "jobs":
            return cmd_jobs(a, client)
        if a.command == "workers":
            return cmd_workers(a, client)
        if a.command == "logs":
            return cmd_logs(a, client)
        if a.command == "job":
            show_job(client.get(a.job_id), a.output)
            return 0
        if a.command == "cancel":
            show_job(client.cancel(a.job_id), a.output)
            return 0
        # watch: progress on stdout for people, on stderr when stdout carries a document
        return _finish(client, a.job_id, a.output,
                       progress=sys.stderr if a.output in ("json", "yaml") else sys.stdout)
