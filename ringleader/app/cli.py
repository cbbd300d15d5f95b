"""The `ringleader` command: coordinator, worker, submit, jobs, job, cancel, workers, watch, demo, certs.

Exit codes come from ringleader.errors' catalog: 0 ok, 1 a failed job or request, 2 bad usage
or a bad spec (one line naming the field), 3 refused credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import grpc

from ringleader import defaults
from ringleader import spec as specs
from ringleader.app import commands, security_flags
from ringleader.app.client import coordinator_address
from ringleader.errors import EXIT_FAILED, EXIT_USAGE, RingleaderError, answer, exit_code_for_status
from ringleader.v1 import jobs_pb2 as pb


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _sizes(text: str) -> list[int]:
    try:
        return [specs.parse_size(s, "sizes") for s in text.split(",") if s.strip()]
    except RingleaderError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _size(text: str) -> int:
    try:
        return specs.parse_size(text)
    except RingleaderError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ringleader", description="Orchestrate GPU collective jobs.")
    p.add_argument("--coordinator", help=f"HOST:PORT of the coordinator (env {defaults.COORDINATOR_ENV}; "
                   f"default {defaults.COORDINATOR_ADDRESS})")
    p.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("coordinator", help="run the coordinator (gRPC and HTTP)")
    c.add_argument("--grpc-address", default=defaults.COORDINATOR_ADDRESS)
    c.add_argument("--http-address", default=defaults.HTTP_ADDRESS, help='"" disables the HTTP side')
    c.add_argument("--db", default="", help="SQLite path (default ~/.local/state/ringleader/jobs.db; :memory: keeps nothing)")
    security_flags.add_server_security(c)

    w = sub.add_parser("worker", help="run a worker daemon for one device (or one per GPU)")
    w.add_argument("--device", default="cpu", help="cpu, cuda:N, or all (one daemon per visible GPU)")
    w.add_argument("--worker-id", default="", help="stable id (default HOST-DEVICE)")
    w.add_argument("--advertise-host", default="", help="address peers use to reach this host")
    w.add_argument("--metrics-address", default="", metavar="HOST:PORT",
                   help='serve Prometheus /metrics here, one port for all devices of this process '
                        '(e.g. 0.0.0.0:9401; default "": off)')
    security_flags.add_worker_security(w)

    _add_submit(sub.add_parser("submit", help="submit a job: a collective sweep, p2p, gradient-average or train"))
    j = sub.add_parser("jobs", help="list jobs, newest first")
    j.add_argument("--state", action="append", default=[],
                   choices=[n for n in pb.JobState.keys() if n != "JOB_STATE_UNSPECIFIED"])
    j.add_argument("--op", default="")
    j.add_argument("--limit", type=int, default=defaults.PAGE_DEFAULT)
    security_flags.add_client_security(j)
    for name, helptext in (("job", "show one job with its results"), ("watch", "follow a job until it ends"),
                           ("cancel", "cancel a queued or running job")):
        x = sub.add_parser(name, help=helptext)
        x.add_argument("job_id")
        x.add_argument("--json", action="store_true")
        security_flags.add_client_security(x)
    security_flags.add_client_security(sub.add_parser("workers", help="list workers"))
    security_flags.add_certs_command(sub)

    d = sub.add_parser("demo", help="coordinator + local workers + one all_reduce sweep, then exit")
    d.add_argument("--max-bytes", type=_size, default=None, help="largest size (default 64M on CPU, 1G on GPU)")
    d.add_argument("--http-address", default="127.0.0.1:0", help="dashboard address (port 0: a free one)")
    d.add_argument("--serve", action="store_true", help="keep everything running after the sweep, until Ctrl-C")
    return p


def _add_submit(s: argparse.ArgumentParser) -> None:
    # Unset flags stay None so that the spec's own defaults (ringleader/spec.py) apply; op, dtype
    # and reduce op are checked by the spec validation, for a one-line error naming the field.
    dflt = specs.DEFAULTS
    s.add_argument("--kind", default="collective", choices=commands.KIND_FLAGS)
    s.add_argument("--op", default="", help="collective jobs: " + ", ".join(specs.OPS))
    s.add_argument("--world-size", "-n", type=int, required=True)
    s.add_argument("--min-bytes", "-b", type=_size, help=f"default {dflt['min_bytes']}")
    s.add_argument("--max-bytes", "-e", type=_size, help=f"default {specs.format_size(dflt['max_bytes'])}")
    s.add_argument("--factor", "-f", type=float, help=f"default {dflt['factor']:g}")
    s.add_argument("--sizes", type=_sizes, help="explicit sizes, e.g. 1K,1M,1G (overrides min/max/factor)")
    s.add_argument("--dtype", "-d", default="", help=", ".join(specs.DTYPE_SIZES) + f" (default {dflt['dtype']})")
    s.add_argument("--reduce-op", "-o", default="", help=", ".join(specs.REDUCE_OPS) + f" (default {dflt['reduce_op']})")
    s.add_argument("--iters", "-i", type=int, help=f"timed iterations (default {dflt['iters']})")
    s.add_argument("--warmup", "-w", type=int, help=f"warm-up iterations (default {dflt['warmup']})")
    s.add_argument("--in-place", action="store_true")
    s.add_argument("--root", "-r", type=int, default=0)
    s.add_argument("--priority", type=int, default=0)
    s.add_argument("--name", default="")
    s.add_argument("--host", default="", help="only workers on this host")
    s.add_argument("--gpu-model", default="", help='only GPUs whose name contains this, e.g. "H200"')
    s.add_argument("--workers", default="", help="exactly these worker ids, comma-separated")
    s.add_argument("--device-type", default="", choices=["", "cuda", "cpu"])
    s.add_argument("--op-timeout", type=float, default=0.0,
                   help=f"seconds without progress before failing (default {specs.DEFAULT_OP_TIMEOUT_S:g})")
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
    security_flags.add_client_security(s)


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    quiet = a.command in ("demo",)  # the demo prints its own story; logs only for problems
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = _run(a)
    except RingleaderError as exc:
        print(f"ringleader: error: {exc}", file=sys.stderr)
        code = answer(exc).exit_code
    except grpc.RpcError as exc:
        print(f"ringleader: error: {_rpc_message(exc, a)}", file=sys.stderr)
        code = exit_code_for_status(exc.code().name)
    except CliError as exc:
        print(f"ringleader: error: {exc}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def _rpc_message(exc: grpc.RpcError, a) -> str:
    if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:  # details start with the field's name
        return exc.details()
    where = f" ({coordinator_address(a.coordinator)})" if exc.code() == grpc.StatusCode.UNAVAILABLE else ""
    return f"{exc.code().name.lower()}{where}: {exc.details()}"


def _run(a) -> int:
    if a.command == "coordinator":
        from ringleader.app.process import CoordinatorConfig, serve

        asyncio.run(serve(CoordinatorConfig(a.grpc_address, a.http_address, a.db,
                                            security=security_flags.server_security(a))))
        return 0
    if a.command == "certs":
        from ringleader.app import certs

        return certs.run(a)
    if a.command == "worker":
        return run_workers(a)
    if a.command == "demo":
        from ringleader.app.demo import run_demo

        return asyncio.run(run_demo(max_bytes=a.max_bytes, http_address=a.http_address, serve=a.serve))
    return commands.run_client_command(a)


def run_workers(a) -> int:
    from worker.daemon import WorkerConfig, local_cuda_devices, run_daemons

    devices = [a.device]
    if a.device == "all":
        devices = local_cuda_devices()
        if not devices:
            raise CliError("--device all: no CUDA device is visible", EXIT_USAGE)
    elif a.device != "cpu" and not (a.device.startswith("cuda:") and a.device[5:].isdigit()):
        raise CliError(f"--device: expected cpu, cuda:N or all, got {a.device!r}", EXIT_USAGE)
    if a.worker_id and len(devices) > 1:
        raise CliError("--worker-id: give it only with a single device", EXIT_USAGE)
    security = security_flags.worker_security(a)
    configs = [WorkerConfig(coordinator=coordinator_address(a.coordinator), device=d, worker_id=a.worker_id,
                            advertise_host=a.advertise_host, security=security) for d in devices]
    metrics = _worker_metrics(a.metrics_address) if a.metrics_address else None
    try:
        asyncio.run(run_daemons(configs, metrics))
    finally:
        if metrics:
            metrics.close()
    return 0


def _worker_metrics(address: str):
    from worker.metrics import WorkerMetrics, parse_address

    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise CliError(f"--metrics-address: {exc}", EXIT_USAGE) from None
    metrics = WorkerMetrics()
    try:
        port = metrics.serve(host, port)
    except OSError as exc:
        raise CliError(f"--metrics-address {address}: {exc.strerror or exc}") from None
    logging.getLogger("ringleader.worker").info("metrics on http://%s:%d/metrics", host, port)
    return metrics
