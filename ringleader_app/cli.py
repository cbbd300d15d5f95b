# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this marker)
"""The `ringleader` command: coordinator, worker, submit, jobs, job, watch, cancel, logs, workers,
demo, completion, certs.

Conventions: `--coordinator` before or after the subcommand; `-o json|table` (or `--json`) on
every command that shows jobs, workers or logs; `--version`; every flag of the coordinator and
the worker also from a RINGLEADER_* variable (ringleader_app/config.py); shell completion
through argcomplete (`ringleader completion bash`).

Exit codes come from ringleader.errors' catalog: 0 ok, 1 a failed job or request, 2 bad usage,
a bad spec or a bad variable (one line naming the field or the variable), 3 refused credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

import argcomplete
import grpc

from ringleader import __version__, defaults, kinds
from ringleader_app import (argtypes, baseline_cmds, check_cmds, commands, completion, config, coordinator_flags, hints,
                            k8s_secrets, security_flags, submit_args, validate_cmds)
from ringleader_app import floors_file
from ringleader_app.config import DEFAULT
from ringleader_app.argtypes import OUTPUTS
from ringleader.errors import EXIT_FAILED, EXIT_USAGE, InvalidSpec, RingleaderError, answer, exit_code_for_status
from ringleader.v1 import jobs_pb2 as pb

SHELLS = ("bash", "zsh", "fish")


class Parser(argparse.ArgumentParser):
    """Bad usage is one line (`ringleader submit: error: -g: ...`, argparse's own last line) and
    exit 2: the whole usage first buried the message under 20 lines; --help has it."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _talker(sub, name: str, helptext: str) -> argparse.ArgumentParser:
    """A subcommand that talks to a coordinator: it takes --coordinator after its name too.
    SUPPRESS: when absent there, the value given before the subcommand (or its variable, or the
    default) stands."""
    x = sub.add_parser(name, help=helptext)
    x.add_argument("--coordinator", default=argparse.SUPPRESS, metavar="HOST:PORT",
                   help="the coordinator's gRPC address (also accepted before the subcommand)")
    return x


def _output_options(x: argparse.ArgumentParser, what: str, outputs: tuple[str, ...] = OUTPUTS,
                    default: str = "table") -> None:
    """-o: only the formats the command prints (a command without extra columns offers no wide);
    default None: the command picks per action (baselines)."""
    said = {"table": "table", "wide": "wide (more columns)", "json": "json", "yaml": "yaml"}
    names = [said[o] + (" (default)" if o == default else "") for o in outputs]
    x.add_argument("-o", "--output", type=argtypes.output, choices=outputs, default=default,
                   help=f"{', '.join(names[:-1])} or {names[-1]}: {what} (README.md, CLI)")
    x.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")


def _client_options(x: argparse.ArgumentParser, what: str, outputs: tuple[str, ...] = OUTPUTS,
                    default: str = "table") -> None:
    """What every client command takes: the output format, and the users' token and TLS."""
    _output_options(x, what, outputs, default)
    security_flags.add_client_security(x)


def _completer(action: argparse.Action, choices) -> None:
    action.completer = argcomplete.completers.ChoicesCompleter(choices)  # type: ignore[attr-defined]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ringleader", description="Orchestrate GPU collective jobs.",
                                epilog="Every flag of the coordinator and the worker can also be set by an "
                                       "environment variable: RINGLEADER_ + the flag's name (README.md).")
    p.add_argument("--version", action="version", version=f"ringleader {__version__}")
    p.add_argument("--coordinator", default=defaults.COORDINATOR_ADDRESS, metavar="HOST:PORT",
                   help="the coordinator's gRPC address, for the worker and the client commands "
                        "(several coordinators on one PostgreSQL: a comma list, the leader is followed)")
    p.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_servers(sub)
    _add_clients(sub)
    d = sub.add_parser("demo", help="coordinator + local workers + one all_reduce sweep, then exit")
    d.add_argument("--max-bytes", type=argtypes.size, default=None, help="largest size (default 64M on CPU, 1G on GPU)")
    d.add_argument("--http-address", default="127.0.0.1:0", help="dashboard address (port 0: a free one)")
    d.add_argument("--serve", action="store_true", help="keep everything running after the sweep, until Ctrl-C")
    d.add_argument("--shared-ranks", type=argtypes.ranks, default=None, metavar="N",
                   help="with one GPU: N ranks share it over NCCL's socket transport (default 4)")
    x = sub.add_parser("completion", help="print the shell completion script (eval it in your shell's rc file)")
    x.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    return p


def _add_servers(sub) -> None:
    c = sub.add_parser("coordinator", help="run the coordinator (gRPC and HTTP)")  # its defaults: the Config's
    c.add_argument("--grpc-address", default=DEFAULT.grpc_address, metavar="HOST:PORT",
                   help="where the gRPC API listens (port 0: a free one)")
    c.add_argument("--worker-address", default=DEFAULT.worker_address, metavar="HOST:PORT",
                   help="also serve the workers' streams here, from a relay process of their own: with thousands of "
                        "workers, their gRPC work and garbage collection leave the process that answers users "
                        "(port 0: a free one; default: none, workers use --grpc-address)")
    c.add_argument("--floors", default=DEFAULT.floors, metavar="FILE",
                   help="judge check figures by this edited table of expectation floors (JSON, as `ringleader "
                        "floors export` prints) over the shipped one; a bad row refuses to start naming the field")
    c.add_argument("--relay-at", type=argtypes.non_negative, default=DEFAULT.relay_at, metavar="N",
                   help="without --worker-address: once N workers' streams are served on the gRPC port, the "
                        "coordinator starts a worker relay of its own beside it and new workers move there by "
                        "themselves (default 512; 0: never)")
    c.add_argument("--relay-share", type=argtypes.non_negative, default=DEFAULT.relay_share, metavar="N",
                   help="the automatic relays: once every relay carries N workers' streams, another starts beside "
                        "them (at most 16), each new worker going to the least loaded (default 10000; 0: one relay)")
    c.add_argument("--relay-cpus", type=argtypes.cpu_list, default=DEFAULT.relay_cpus, metavar="LIST",
                   help="the CPUs worker relay processes run on, e.g. 2-31 (default: the coordinator's): a relay "
                        "does the workers' stream work the coordinator would, as a rack's relay host would")
    c.add_argument("--http-address", default=DEFAULT.http_address, metavar="HOST:PORT",
                   help='where the REST API, web UI and /metrics listen ("" disables them)')
    c.add_argument("--db", default=DEFAULT.db, metavar="PATH|URL",
                   help="SQLite path (default ~/.local/state/ringleader/jobs.db; :memory: keeps nothing), or "
                        "postgresql://... : several coordinators share it, one leads, the others stand by")
    c.add_argument("--lease-ttl", type=argtypes.seconds, default=DEFAULT.lease_ttl, metavar="SECONDS",
                   help="on PostgreSQL: a leader that cannot renew its lease for this long is replaced (default 5)")
    c.add_argument("--advertise-address", default=DEFAULT.advertise_address, metavar="HOST:PORT",
                   help="on PostgreSQL: the gRPC address standbys send clients to while this one leads "
                        "(default: --grpc-address, a wildcard host replaced by this machine's name)")
    coordinator_flags.add_fleet_flags(c)
    c.add_argument("--k8s-taint-nodes", action="store_true",
                   help="in Kubernetes: label and taint (NoSchedule) the Node of a failed worker, "
                        "untaint it when healthy (needs deploy/k8s/components/node-taints)")
    c.add_argument("--k8s-taint-devices", action="store_true", help="in Kubernetes with NVIDIA's DRA driver: a failed "
                   "GPU gets a DeviceTaintRule, its node a taint only when all its workers failed (components/device-taints)")
    c.add_argument("--webhook", action=argtypes.Extend, type=argtypes.url_list, default=list(DEFAULT.webhook), metavar="URL",
                   help="remediation hook: POST each worker's verdict change there as a CloudEvents JSON event, "
                        "retried with backoff (repeatable, or URLs separated by commas; docs/hooks.md)")
    c.add_argument("--k8s-token-review", action="store_true",
                   help="in Kubernetes: a worker pod's ServiceAccount token naming its node lets a replaced pod "
                        "re-claim that node's worker ids, checked with TokenReview (deploy/k8s/components/k8s-identity)")
    security_flags.add_server_security(c)

    w = _talker(sub, "worker", "run a worker daemon for one device (or one per GPU)")
    _completer(w.add_argument("--device", type=argtypes.device, default="cpu",
                              help="cpu, cuda:N, or all (one daemon per visible GPU)"), ["cpu", "all", "cuda:0"])
    w.add_argument("--worker-id", default="", help="stable id (default HOST-cudaN, or HOST-cpuN: the lowest N free here)")
    w.add_argument("--advertise-host", default="", help="address peers use to reach this host")
    w.add_argument("--host-name", default="", metavar="NAME",
                   help="the host name this worker registers with and its GPU daemons' default ids start with (default: the "
                        "machine's; in Kubernetes the node's name, for --k8s-taint-nodes and --k8s-token-review)")
    w.add_argument("--k8s-token-file", default="", metavar="PATH",
                   help="in Kubernetes: the pod's projected ServiceAccount token (audience ringleader), sent at "
                        "registration so a replaced pod keeps its node's worker ids (coordinator --k8s-token-review)")
    _add_worker_ports(w)
    security_flags.add_worker_security(w)


def _add_worker_ports(w) -> None:
    """What the worker serves (its metrics) and how it keeps its link to the coordinator."""
    w.add_argument("--metrics-address", type=argtypes.metrics_address, default="", metavar="HOST:PORT",
                   help='serve Prometheus /metrics here, one port for all devices of this process '
                        '(e.g. 0.0.0.0:9401; default "": off)')
    w.add_argument("--reconnect-max", type=argtypes.seconds, default=5.0, metavar="SECONDS",
                   help="the longest wait between two attempts to reach the coordinator after the link is lost "
                        "(exponential backoff with jitter up to this; default 5: smaller, back sooner after a "
                        "coordinator restart, more dials while it is down)")


def _add_clients(sub) -> None:
    s = _talker(sub, "submit", "submit a job: a collective sweep, p2p, gradient-average, train or algo-sweep")
    submit_args.add_submit(s, _completer)
    _client_options(s, "the job (and, with --wait, its results) as `ringleader job -o json` prints it")
    j = _talker(sub, "jobs", "list jobs, newest first")
    j.add_argument("--state", action="append", default=[],
                   choices=[n for n in pb.JobState.keys() if n != "JOB_STATE_UNSPECIFIED"],
                   help="only jobs in this state (repeat for several)")
    _completer(j.add_argument("--op", default="", help="only jobs of this op (or job kind)"), kinds.listed_names())
    j.add_argument("--limit", type=argtypes.count, default=defaults.PAGE_DEFAULT,
                   help=f"at most this many jobs (default {defaults.PAGE_DEFAULT})")
    j.add_argument("--probes", action="store_true",
                   help="also the jobs that work for another (localize's probes, listed under the job they localize)")
    _client_options(j, '{"jobs": [Job without results, ...], "next_before": ID or null}')
    for name, helptext in (("job", "show one job with its results"), ("watch", "follow a job until it ends"),
                           ("cancel", "cancel a queued or running job")):
        x = _talker(sub, name, helptext)
        x.add_argument("job_id", help="the job's id (`ringleader jobs` lists them)").completer = \
            completion.job_ids  # type: ignore[attr-defined]
        _client_options(x, '{...Job, "results": [SizeResult, ...]}, as GET /api/v1/jobs/ID')
    x = _talker(sub, "logs", "each rank's executor stderr captured during a job")
    x.add_argument("job_id", help="the job's id").completer = completion.job_ids  # type: ignore[attr-defined]
    x.add_argument("-f", "--follow", action="store_true",
                   help="wait for the job to end (its progress on stderr), then print the logs")
    x.add_argument("--rank", type=int, default=None, help="only this rank")
    _client_options(x, '{"job_id": ID, "ranks": [{"rank", "worker_id", "received", "text"}, ...]}')
    _client_options(_talker(sub, "workers", "list workers"), '{"workers": [WorkerInfo, ...]}')
    check_cmds.add_commands(sub, _talker, _client_options)
    security_flags.add_certs_command(sub)
    k8s_secrets.add_flag(sub.choices["certs"])
    baseline_cmds.add_parsers(sub, _talker, _client_options)
    validate_cmds.add_commands(sub, _talker, _client_options)
    floors = sub.add_parser("floors", help="the expectation floors check figures are judged by, as JSON to edit "
                                           "and give a coordinator (--floors FILE)")
    floors.add_argument("what", nargs="?", default="export", help="export (the only one)")
    floors.add_argument("--floors", default="", metavar="FILE",
                        help="an edited table: print it merged over the shipped one (what a coordinator started "
                             "with --floors FILE judges by), after checking every row")


def main(argv: list[str] | None = None) -> None:
    argcomplete.autocomplete(build_parser())  # answers and exits when a shell asks for completions
    try:
        a, settings = config.load(build_parser, sys.argv[1:] if argv is None else argv)
    except config.ConfigError as exc:
        print(f"ringleader: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    quiet = a.command in ("demo",)  # the demo prints its own story; logs only for problems
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        code = _run(a, settings)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
    except BrokenPipeError:
        code = _quiet_broken_pipe()
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


def _quiet_broken_pipe() -> int:
    """`ringleader jobs | head -3`: the reader left, which is no error worth a traceback. Point
    stdout at /dev/null so that the interpreter's last flush cannot raise again; exit as a
    process killed by SIGPIPE would (128 + 13), so `set -o pipefail` scripts still see it."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141


def _rpc_message(exc: grpc.RpcError, a) -> str:
    if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:  # details start with the field's name
        return exc.details()
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return f"{exc.code().name.lower()}: {exc.details()}"
    return f"unavailable ({a.coordinator}): {exc.details()}{hints.unavailable(exc.details(), a)}"


def _run(a, settings: config.Settings) -> int:
    if a.command == "coordinator":
        from ringleader_app.process import serve

        asyncio.run(serve(config.coordinator_config(settings)))
        return 0
    if a.command == "certs":
        return k8s_secrets.run(a)
    if a.command == "worker":
        return run_workers(settings)
    if a.command == "demo":
        from ringleader_app.demo import run_demo

        return asyncio.run(run_demo(max_bytes=a.max_bytes, http_address=a.http_address, serve=a.serve,
                                    shared_ranks=a.shared_ranks))
    if a.command == "completion":
        print(argcomplete.shellcode(["ringleader"], shell=a.shell), end="")
        return 0
    if a.command in baseline_cmds.COMMANDS:
        return baseline_cmds.run(a)
    if a.command in validate_cmds.COMMANDS:
        return validate_cmds.run(a)
    if a.command == "floors":
        from coordinator.health import expectations  # the coordinator's table, loaded only here
        if getattr(a, "what", "export") not in ("export", None):
            raise InvalidSpec("what", f"expected export, got {a.what[:64]!r}")
        print(json.dumps(expectations.floors_doc(floors_file.load_floors(a.floors)), indent=1))
        return 0
    return check_cmds.run(a) if check_cmds.handles(a) else commands.run_client_command(a)


def run_workers(settings: config.Settings) -> int:
    from ringleader_app.worker_ids import cpu_worker_id
    from worker import faults
    from worker.daemon import WorkerConfig, run_daemons
    from worker.ids import local_cuda_devices
    from worker.supervisor import torch_installed

    if not torch_installed():  # else each executor's start fails with an import traceback, forever
        raise CliError("the worker needs torch, which this environment lacks: "
                       "pip install 'ringleader[worker]' (with -c constraints.txt from the source tree)")
    try:
        faults.check_allowed()  # the fault injector is for tests: refuse before anything starts
    except faults.FaultsRefused as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    devices = [settings.device]
    if settings.device == "all":
        devices = local_cuda_devices()
        if not devices:
            raise CliError("--device all: no CUDA device is visible; on a CPU host use --device cpu "
                           "(one per worker daemon: start two for a 2-rank job)", EXIT_USAGE)
    if settings.worker_id and len(devices) > 1:
        raise CliError("--worker-id: give it only with a single device", EXIT_USAGE)
    security = security_flags.worker_security(settings)
    # A CPU daemon's default id is HOST-cpuN, kept across restarts (ringleader_app/worker_ids.py).
    worker_id = settings.worker_id or (cpu_worker_id() if devices == ["cpu"] else "")
    configs = [config.dataclass_from(WorkerConfig, settings, device=d, worker_id=worker_id, security=security)
               for d in devices]
    metrics = _worker_metrics(settings.metrics_address) if settings.metrics_address else None
    try:
        asyncio.run(run_daemons(configs, metrics))
    finally:
        if metrics:
            metrics.close()
    return 0


def _worker_metrics(address: str):
    from worker.metrics import WorkerMetrics, parse_address

    host, port = parse_address(address)  # checked when the flag or its variable was read
    metrics = WorkerMetrics()
    try:
        port = metrics.serve(host, port)
    except OSError as exc:
        raise CliError(f"--metrics-address {address}: {exc.strerror or exc}") from None
    logging.getLogger("ringleader.worker").info("metrics on http://%s:%d/metrics", host, port)
    return metrics
