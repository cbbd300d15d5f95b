"""The `ringleader` command: coordinator, worker, submit, jobs, job, cancel, workers, watch, demo."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import grpc

from ringleader import jobspec
from ringleader import spec as specs
from ringleader import table
from ringleader.client import Client, coordinator_address
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

EXIT_FAILED, EXIT_USAGE = 1, 2
KIND_FLAGS = ("collective", "p2p", "gradient-average", "train")


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _sizes(text: str) -> list[int]:
    try:
        return [specs.parse_size(s, "sizes") for s in text.split(",") if s.strip()]
    except InvalidSpec as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _size(text: str) -> int:
    try:
        return specs.parse_size(text)
    except InvalidSpec as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ringleader", description="Orchestrate GPU collective jobs.")
    p.add_argument("--coordinator", help="HOST:PORT of the coordinator (env RINGLEADER_COORDINATOR; "
                   f"default {coordinator_address()})")
    p.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("coordinator", help="run the coordinator (gRPC and HTTP)")
    c.add_argument("--grpc-address", default="127.0.0.1:50051")
    c.add_argument("--http-address", default="127.0.0.1:8080", help='"" disables the HTTP side')
    c.add_argument("--db", default="", help="SQLite path (default ~/.local/state/ringleader/jobs.db)")

    w = sub.add_parser("worker", help="run a worker daemon for one device (or one per GPU)")
    w.add_argument("--device", default="cpu", help="cpu, cuda:N, or all (one daemon per visible GPU)")
    w.add_argument("--worker-id", default="", help="stable id (default HOST-DEVICE)")
    w.add_argument("--advertise-host", default="", help="address peers use to reach this host")
    w.add_argument("--metrics-address", default="", metavar="HOST:PORT",
                   help='serve Prometheus /metrics here, one port for all devices of this process '
                        '(e.g. 0.0.0.0:9400; default "": off)')

    s = sub.add_parser("submit", help="submit a job: a collective sweep, p2p, gradient-average or train")
    s.add_argument("--kind", default="collective", choices=KIND_FLAGS)
    # op, dtype and reduce op are checked by the spec validation, for a one-line error naming the field.
    s.add_argument("--op", default="", help="collective jobs: " + ", ".join(specs.OPS))
    s.add_argument("--world-size", "-n", type=int, required=True)
    s.add_argument("--min-bytes", "-b", type=_size, default=8)
    s.add_argument("--max-bytes", "-e", type=_size, default=64 << 20)
    s.add_argument("--factor", "-f", type=float, default=2.0)
    s.add_argument("--sizes", type=_sizes, help="explicit sizes, e.g. 1K,1M,1G (overrides min/max/factor)")
    s.add_argument("--dtype", "-d", default="float32", help=", ".join(specs.DTYPE_SIZES))
    s.add_argument("--reduce-op", "-o", default="sum", help=", ".join(specs.REDUCE_OPS))
    s.add_argument("--iters", "-i", type=int, default=20)
    s.add_argument("--warmup", "-w", type=int, default=5)
    s.add_argument("--in-place", action="store_true")
    s.add_argument("--root", "-r", type=int, default=0)
    s.add_argument("--priority", type=int, default=0)
    s.add_argument("--name", default="")
    s.add_argument("--host", default="", help="only workers on this host")
    s.add_argument("--gpu-model", default="", help='only GPUs whose name contains this, e.g. "H200"')
    s.add_argument("--workers", default="", help="exactly these worker ids, comma-separated")
    s.add_argument("--device-type", default="", choices=["", "cuda", "cpu"])
    s.add_argument("--op-timeout", type=float, default=0.0, help="seconds without progress before failing")
    s.add_argument("--pairwise", action="store_true", help="p2p: every ordered pair in turn -> bandwidth matrix")
    s.add_argument("--async", dest="async_", action="store_true", help="p2p: isend/irecv + wait (default send/recv)")
    s.add_argument("--size", type=_size, default=None, help="gradient-average: gradient bytes (default 64M)")
    s.add_argument("--model", default="", help="train: linear (default) or mlp")
    s.add_argument("--steps", type=int, default=None, help="train: steps (default 50)")
    s.add_argument("--batch-size", type=int, default=None, help="train: per-rank batch size (default 64)")
    s.add_argument("--lr", type=float, default=None, help="train: learning rate (default 0.05)")
    s.add_argument("--seed", type=int, default=0, help="train: data and weight seed")
    s.add_argument("--wait", action="store_true", help="show progress, then the results table")
    s.add_argument("--json", action="store_true", help="print the job (and results) as JSON")

    j = sub.add_parser("jobs", help="list jobs, newest first")
    j.add_argument("--state", action="append", default=[], choices=[n for n in pb.JobState.keys() if n != "JOB_STATE_UNSPECIFIED"])
    j.add_argument("--op", default="")
    j.add_argument("--limit", type=int, default=50)
    for name, helptext in (("job", "show one job with its results"), ("watch", "follow a job until it ends"),
                           ("cancel", "cancel a queued or running job")):
        x = sub.add_parser(name, help=helptext)
        x.add_argument("job_id")
        x.add_argument("--json", action="store_true")
    sub.add_parser("workers", help="list workers")

    d = sub.add_parser("demo", help="coordinator + local workers + one all_reduce sweep, then exit")
    d.add_argument("--max-bytes", type=_size, default=None, help="largest size (default 64M on CPU, 1G on GPU)")
    d.add_argument("--http-address", default="127.0.0.1:0", help="dashboard address (port 0: a free one)")
    d.add_argument("--serve", action="store_true", help="keep everything running after the sweep, until Ctrl-C")
    return p


def spec_from_args(a: argparse.Namespace) -> pb.JobSpec:
    worker_ids = [w for w in a.workers.split(",") if w]
    spec = pb.JobSpec(world_size=a.world_size, priority=a.priority, name=a.name, op_timeout_s=a.op_timeout,
                      placement=pb.Placement(host=a.host, gpu_model=a.gpu_model, worker_ids=worker_ids,
                                             device_type=a.device_type))
    sweep = dict(sizes=a.sizes) if a.sizes else dict(min_bytes=a.min_bytes, max_bytes=a.max_bytes, factor=a.factor)
    if a.kind == "collective":
        if not a.op:
            raise InvalidSpec("collective.op", "required for collective jobs (--op all_reduce, ...)")
        spec.collective.CopyFrom(pb.CollectiveSpec(op=a.op, dtype=a.dtype, reduce_op=a.reduce_op, iters=a.iters,
                                                   warmup=a.warmup, in_place=a.in_place, root=a.root, **sweep))
    elif a.kind == "p2p":
        spec.p2p.CopyFrom(pb.P2PSpec(iters=a.iters, warmup=a.warmup, pairwise=a.pairwise,
                                     mode="async" if a.async_ else "blocking", **sweep))
    elif a.kind == "gradient-average":
        spec.gradient_average.CopyFrom(pb.GradientAverageSpec(size_bytes=a.size or 0, iters=a.iters, warmup=a.warmup))
    else:
        t = pb.TrainSpec(model=a.model, seed=a.seed)
        for name in ("steps", "batch_size", "lr"):  # only what was given: 0 must reach validation
            if getattr(a, name) is not None:
                setattr(t, name, getattr(a, name))
        spec.train.CopyFrom(t)
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


def show_job(job: pb.Job, as_json: bool) -> None:
    if as_json:
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
        if a.json:
            show_job(job, True)
        else:
            print(job.id)
        return 0
    job = follow(client, job.id, out=sys.stderr)
    show_job(job, a.json)
    return 0 if job.state == pb.SUCCEEDED else EXIT_FAILED


def cmd_jobs(a, client: Client) -> int:
    for job in client.list(states=[pb.JobState.Value(s) for s in a.state], op=a.op, limit=a.limit).jobs:
        print(table.job_line(job))
    return 0


def cmd_workers(a, client: Client) -> int:
    print(f"{'WORKER':<28} {'STATE':<12} {'DEVICE':<26} {'HOST':<16} {'JOB':<13} WARM")
    for w in client.workers():
        device = f"{w.device.type}:{w.device.index} {w.device.name}"[:26]
        print(f"{w.worker_id:<28} {pb.WorkerState.Name(w.state):<12} {device:<26} {w.host:<16} "
              f"{w.job_id or '-':<13} {'yes' if w.warm_group else '-'}")
    return 0


def run_client_command(a) -> int:
    with Client(coordinator_address(a.coordinator)) as client:
        if a.command == "submit":
            return cmd_submit(a, client)
        if a.command == "jobs":
            return cmd_jobs(a, client)
        if a.command == "workers":
            return cmd_workers(a, client)
        if a.command == "job":
            show_job(client.get(a.job_id), a.json)
            return 0
        if a.command == "cancel":
            show_job(client.cancel(a.job_id), a.json)
            return 0
        if a.command == "watch":
            job = follow(client, a.job_id, out=sys.stdout)
            show_job(job, a.json)
            return 0 if job.state == pb.SUCCEEDED else EXIT_FAILED
    raise CliError(f"unknown command {a.command}", EXIT_USAGE)


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    quiet = a.command in ("demo",)  # the demo prints its own story; logs only for problems
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if a.command == "coordinator":
            from coordinator.main import CoordinatorConfig, serve

            asyncio.run(serve(CoordinatorConfig(a.grpc_address, a.http_address, a.db)))
            code = 0
        elif a.command == "worker":
            code = run_workers(a)
        elif a.command == "demo":
            from ringleader.demo import run_demo

            code = asyncio.run(run_demo(max_bytes=a.max_bytes, http_address=a.http_address, serve=a.serve))
        else:
            code = run_client_command(a)
    except InvalidSpec as exc:
        print(f"ringleader: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:  # details start with the field's name
            code, message = EXIT_USAGE, exc.details()
        else:
            where = f" ({coordinator_address(a.coordinator)})" if exc.code() == grpc.StatusCode.UNAVAILABLE else ""
            code, message = EXIT_FAILED, f"{exc.code().name.lower()}{where}: {exc.details()}"
        print(f"ringleader: error: {message}", file=sys.stderr)
    except CliError as exc:
        print(f"ringleader: error: {exc}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def run_workers(a) -> int:
    from worker.daemon import WorkerConfig, run_daemons

    devices = [a.device]
    if a.device == "all":
        import torch

        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if not devices:
            raise CliError("--device all: no CUDA device is visible", EXIT_USAGE)
    elif a.device != "cpu" and not (a.device.startswith("cuda:") and a.device[5:].isdigit()):
        raise CliError(f"--device: expected cpu, cuda:N or all, got {a.device!r}", EXIT_USAGE)
    if a.worker_id and len(devices) > 1:
        raise CliError("--worker-id: give it only with a single device", EXIT_USAGE)
    configs = [WorkerConfig(coordinator=coordinator_address(a.coordinator), device=d, worker_id=a.worker_id,
                            advertise_host=a.advertise_host) for d in devices]
    metrics = None
    if a.metrics_address:
        from worker.metrics import WorkerMetrics, parse_address

        try:
            host, port = parse_address(a.metrics_address)
        except ValueError as exc:
            raise CliError(f"--metrics-address: {exc}", EXIT_USAGE) from None
        metrics = WorkerMetrics()
        try:
            port = metrics.serve(host, port)
        except OSError as exc:
            raise CliError(f"--metrics-address {a.metrics_address}: {exc.strerror or exc}") from None
        logging.getLogger("ringleader.worker").info("metrics on http://%s:%d/metrics", host, port)
    try:
        asyncio.run(run_daemons(configs, metrics))
    finally:
        if metrics:
            metrics.close()
    return 0
