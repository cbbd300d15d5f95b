"""The client commands of the CLI: submit, jobs, job, watch, cancel, logs, workers (over gRPC).

Each prints a table, or with `-o json` one JSON document on stdout (progress goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys

from ringleader import jobspec, kinds
from ringleader import spec as specs
from ringleader.app import table
from ringleader.app.client import Client
from ringleader.app.security_flags import client_security
from ringleader.jsonview import to_json
from ringleader.errors import EXIT_FAILED, InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

def spec_from_args(a: argparse.Namespace) -> pb.JobSpec:
    worker_ids = [w for w in a.workers.split(",") if w]
    spec = pb.JobSpec(world_size=a.world_size, priority=a.priority, name=a.name, op_timeout_s=a.op_timeout,
                      placement=pb.Placement(host=a.host, gpu_model=a.gpu_model, worker_ids=worker_ids,
                                             device_type=a.device_type))
    kind = kinds.by_cli_name(a.kind)
    getattr(spec, kind.name).CopyFrom(kind.resolve("from_args")(a))  # the kind's flags (ringleader/app/kindargs.py)
    return spec


def follow(client: Client, job_id: str, out=sys.stderr) -> pb.Job:
    """Print progress lines while the job runs; return the finished job."""
    shown = -1.0
    for ev in client.watch(job_id):
        kind = ev.WhichOneof("event")
        if kind == "progress" and ev.progress.total:
            fraction = ev.progress.done / ev.progress.total
            if fraction >= shown + 0.1 or fraction == 1:  # about ten lines per job, not one per step
                shown = fraction
                print(f"[{job_id}] {ev.progress.done}/{ev.progress.total}", file=out, flush=True)
        elif kind == "state":
            print(f"[{job_id}] {table.state_name(ev.state.state)}: {ev.state.reason}", file=out, flush=True)
        elif kind == "result":
            r = ev.result
            print(f"[{job_id}] {specs.format_size(r.size_bytes):>6}B  {r.time_us:10.2f} us  "
                  f"busbw {r.busbw_gbps:8.2f} GB/s  wrong {r.wrong}", file=out, flush=True)
    return client.get(job_id)


def show_job(job: pb.Job, output: str) -> None:
    if output == "json":
        print(table.job_json(job))
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
    jobspec.normalize(spec)  # the same checks as the coordinator, before any network call
    job = client.submit(spec)
    if not a.wait:
        if a.output == "json":
            show_job(job, "json")
        else:
            print(job.id)
        return 0
    return _finish(client, job.id, a.output, progress=sys.stderr)


def _finish(client: Client, job_id: str, output: str, progress) -> int:
    """Follow a job to its end, then show it; the exit code says whether it succeeded."""
    job = follow(client, job_id, out=progress)
    show_job(job, output)
    return 0 if job.state == pb.SUCCEEDED else EXIT_FAILED


def cmd_jobs(a, client: Client) -> int:
    page = client.list(states=[pb.JobState.Value(s) for s in a.state], op=a.op, limit=a.limit)
    if a.output == "json":
        print(table.jobs_json(page))
    else:
        for job in page.jobs:
            print(table.job_line(job))
    return 0


def cmd_workers(a, client: Client) -> int:
    workers = client.workers()
    print(table.workers_json(workers) if a.output == "json" else table.workers_table(workers))
    return 0


def cmd_logs(a, client: Client) -> int:
    logs = client.logs(a.job_id)
    if a.rank is not None:
        ranks = [r for r in logs.ranks if r.rank == a.rank]
        if not ranks:
            raise InvalidSpec("--rank", f"job {a.job_id} has no rank {a.rank} "
                                      f"(ranks: {', '.join(str(r.rank) for r in logs.ranks) or 'none'})")
        del logs.ranks[:]
        logs.ranks.extend(ranks)
    print(json.dumps(to_json(logs), indent=2) if a.output == "json" else table.logs_text(logs))
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
        # watch: progress on stdout for people, on stderr when stdout carries JSON
        return _finish(client, a.job_id, a.output, progress=sys.stderr if a.output == "json" else sys.stdout)
