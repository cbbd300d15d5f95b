"""The CLI's conventions: --coordinator before or after the subcommand, -o json|table, --version,
RINGLEADER_* variables (flag > environment > default), shell completion, `ringleader logs` and
the demo's last line. Parser and settings tests run in-process; the rest against a real
coordinator (with its HTTP side) and real worker processes (tests/integration/cluster.py)."""

from __future__ import annotations

import dataclasses

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest

from integration.cluster import Cluster, executor_pid, ringleader_cmd
from ringleader import __version__, defaults, jobspec
from ringleader_app import config
from ringleader_app.cli import build_parser, main
from ringleader_app.config import CoordinatorConfig
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

ROOT = Path(__file__).resolve().parents[2]
# Every command that talks to a coordinator, with the arguments it needs.
TALKERS = {
    "worker": ["worker"],
    "submit": ["submit", "--op", "all_reduce", "--world-size", "2"],
    "jobs": ["jobs"],
    "job": ["job", "ID"],
    "watch": ["watch", "ID"],
    "cancel": ["cancel", "ID"],
    "logs": ["logs", "ID"],
    "workers": ["workers"],
}
SHOWERS = {k: v for k, v in TALKERS.items() if k != "worker"}  # the commands that take -o


@pytest.fixture(autouse=True)
def no_ringleader_env(monkeypatch):
    """Each test sets the variables it means: none leak in from the machine's environment."""
    for name in [n for n in os.environ if n.startswith(config.ENV_PREFIX)]:
        monkeypatch.delenv(name)


def load(argv: list[str]):
    return config.load(build_parser, argv)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run `ringleader ARGV` in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


# ---- --coordinator, -o, --version -----------------------------------------------------------


@pytest.mark.parametrize("command", TALKERS)
def test_coordinator_before_or_after_the_subcommand(command, monkeypatch):
    argv = TALKERS[command]
    assert load(argv)[0].coordinator == defaults.COORDINATOR_ADDRESS
    assert load(["--coordinator", "before:1", *argv])[0].coordinator == "before:1"
    assert load([*argv, "--coordinator", "after:2"])[0].coordinator == "after:2"
    assert load(["--coordinator", "before:1", *argv, "--coordinator", "after:2"])[0].coordinator == "after:2"
    monkeypatch.setenv("RINGLEADER_COORDINATOR", "env:3")
    assert load(argv)[0].coordinator == "env:3"
    assert load([*argv, "--coordinator", "after:2"])[0].coordinator == "after:2"


@pytest.mark.parametrize("command", SHOWERS)
def test_every_showing_command_takes_output(command):
    argv = SHOWERS[command]
    assert load(argv)[0].output == "table"
    for given in (["-o", "json"], ["--output", "json"], ["--json"]):
        assert load([*argv, *given])[0].output == "json", given
    assert load([*argv, "-o", "table"])[0].output == "table"


def test_output_names_the_reduce_op_flag_for_a_reduce_op(capsys):
    code, _, err = cli(capsys, "submit", "--op", "all_reduce", "--world-size", "2", "-o", "sum")
    assert code == 2
    assert "expected table, wide, json, yaml, got 'sum'" in err and "the reduce op, is --reduce-op" in err


def test_version(capsys):
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.strip() == f"ringleader {__version__}"


# ---- RINGLEADER_* variables -----------------------------------------------------------------

# A valid value for each option of the coordinator and the worker, as a variable would hold it,
# and what it must become. An option added later without a sample here gets a generic one.
SAMPLES = {
    "device": ("cuda:1", "cuda:1"),
    "metrics_address": ("0.0.0.0:9401", "0.0.0.0:9401"),
    "verbose": ("yes", True),
    "worker_ttl": ("90", 90.0),
    "heartbeat_timeout": ("30", 30.0),
    "check_every": ("300", 300.0),
    "quarantine_max_share": ("0.25", 0.25),
    "webhook": ("http://a/1,http://b/2", ["http://a/1", "http://b/2"]),
    "lease_ttl": ("15", 15.0),
    "worker_msgs_per_turn": ("64", 64),
    "pass_ranks": ("32", 32),
    "relay_at": ("1000", 1000),
    "relay_share": ("2500", 2500),
    "relay_cpus": ("2-4,8", (2, 3, 4, 8)),
    "shed_lag": ("0", 0.0),
    "stall_warn": ("0.05", 0.05),
    "gc_pace": ("0.5", 0.5),
    "check_hold_after": ("0", 0.0),
    "check_hold_share": ("0.5", 0.5),
    "drain_timeout": ("2", 2.0),
    "reconnect_max": ("0.5", 0.5),
}


def _sample(action: argparse.Action):
    if action.dest in SAMPLES:
        return SAMPLES[action.dest]
    if isinstance(action, argparse._StoreTrueAction):
        return "1", True
    if action.choices:
        choice = list(action.choices)[-1]
        return str(choice), choice
    if action.type in (int, float):
        return "7", action.type(7)
    return "from-the-environment", "from-the-environment"


def test_the_variables_the_readme_promises_exist():
    names = {config.env_name(a) for c in config.ENV_COMMANDS for a in config.env_actions(build_parser(), c)}
    assert {"RINGLEADER_COORDINATOR", "RINGLEADER_GRPC_ADDRESS", "RINGLEADER_HTTP_ADDRESS", "RINGLEADER_DB",
            "RINGLEADER_DEVICE", "RINGLEADER_WORKER_ID", "RINGLEADER_ADVERTISE_HOST",
            "RINGLEADER_METRICS_ADDRESS", "RINGLEADER_VERBOSE"} <= names


@pytest.mark.parametrize("command", config.ENV_COMMANDS)
def test_every_flag_of_the_coordinator_and_worker_reads_its_variable(command, monkeypatch):
    sub = config.subparsers(build_parser())[command]
    options = [a for a in sub._actions if config._settable(a)] + [
        a for a in build_parser()._actions if config._settable(a)]
    assert len(options) >= 4
    for action in options:
        text, expected = _sample(action)
        monkeypatch.setenv(config.env_name(action), text)
        args, settings = load([command])
        assert getattr(args, action.dest) == expected == getattr(settings, action.dest), action.dest
        monkeypatch.delenv(config.env_name(action))
        assert getattr(load([command])[0], action.dest) == action.default


def test_flag_beats_environment_beats_default(monkeypatch):
    assert load(["worker"])[0].device == "cpu"
    monkeypatch.setenv("RINGLEADER_DEVICE", "cuda:1")
    assert load(["worker"])[0].device == "cuda:1"
    assert load(["worker", "--device", "cuda:2"])[0].device == "cuda:2"
    monkeypatch.setenv("RINGLEADER_VERBOSE", "0")
    assert load(["-v", "worker"])[0].verbose is True  # a flag that can only switch on still wins
    monkeypatch.setenv("RINGLEADER_HTTP_ADDRESS", "")  # an empty variable is a value: no HTTP side
    assert load(["coordinator"])[0].http_address == ""


@pytest.mark.parametrize("command, name, value, message", [
    ("worker", "RINGLEADER_DEVICE", "gpu", "expected cpu, cuda:N or all, got 'gpu'"),
    ("worker", "RINGLEADER_METRICS_ADDRESS", "9401", "expected HOST:PORT, got '9401'"),
    ("coordinator", "RINGLEADER_VERBOSE", "maybe", "valid boolean"),
])
def test_a_bad_variable_is_one_line_naming_it_and_exit_2(capsys, monkeypatch, command, name, value, message):
    monkeypatch.setenv(name, value)
    code, out, err = cli(capsys, command)
    assert code == 2 and out == ""
    assert err.startswith(f"ringleader: error: {name}={value!r}: ") and message in err, err
    assert err.count("\n") == 1


def _parser_with_later_flags() -> argparse.ArgumentParser:
    """build_parser plus flags another change could add to the coordinator and the worker."""
    p = build_parser()
    subs = config.subparsers(p)
    subs["coordinator"].add_argument("--later-seconds", type=float, default=30.0, help="seconds")
    subs["worker"].add_argument("--later-switch", action="store_true", help="plaintext")
    for command in ("worker", "jobs", "demo"):  # a connection's flag, on the worker and a client
        subs[command].add_argument("--later-file", default="", help="token")
    return p


def test_a_flag_added_later_gets_its_variable_and_its_readme_row(monkeypatch):
    monkeypatch.setenv("RINGLEADER_LATER_SECONDS", "2.5")
    monkeypatch.setenv("RINGLEADER_LATER_SWITCH", "true")
    args, settings = config.load(_parser_with_later_flags, ["coordinator"])
    assert args.later_seconds == settings.later_seconds == 2.5
    assert config.load(_parser_with_later_flags, ["coordinator", "--later-seconds", "9"])[0].later_seconds == 9.0
    assert config.load(_parser_with_later_flags, ["worker"])[0].later_switch is True
    monkeypatch.setenv("RINGLEADER_LATER_SECONDS", "soon")
    with pytest.raises(config.ConfigError, match=r"^RINGLEADER_LATER_SECONDS='soon': invalid float value"):
        config.load(_parser_with_later_flags, ["coordinator"])
    monkeypatch.setenv("RINGLEADER_LATER_FILE", "/run/token")
    assert config.load(_parser_with_later_flags, ["jobs"])[0].later_file == "/run/token"  # the worker's variable
    assert config.load(_parser_with_later_flags, ["jobs", "--later-file", "t"])[0].later_file == "t"
    assert config.load(_parser_with_later_flags, ["demo"])[0].later_file == ""  # no coordinator to talk to
    table = config.env_table(_parser_with_later_flags())
    assert "| `RINGLEADER_LATER_SECONDS` | `--later-seconds` | coordinator | `30.0` | seconds |" in table
    assert "| `RINGLEADER_LATER_SWITCH` | `--later-switch` | worker |  | plaintext |" in table
    assert "| `RINGLEADER_LATER_FILE` | `--later-file` | worker, jobs |  | token |" in table


def test_one_settings_object_reaches_the_coordinator_and_worker_configs(monkeypatch):
    from worker.daemon import WorkerConfig

    monkeypatch.setenv("RINGLEADER_DB", "/tmp/x.db")
    _, settings = load(["coordinator", "--grpc-address", "0.0.0.0:1", "--http-address", ""])
    assert config.dataclass_from(CoordinatorConfig, settings) == CoordinatorConfig(
        grpc_address="0.0.0.0:1", http_address="", db="/tmp/x.db")
    monkeypatch.setenv("RINGLEADER_COORDINATOR", "coord:50051")
    monkeypatch.setenv("RINGLEADER_ADVERTISE_HOST", "10.0.0.7")
    _, settings = load(["worker", "--worker-id", "w9"])
    assert config.dataclass_from(WorkerConfig, settings, device="cuda:3") == WorkerConfig(
        coordinator="coord:50051", device="cuda:3", worker_id="w9", advertise_host="10.0.0.7")


def test_the_timing_knobs_tests_set_reach_the_configs_and_refuse_nonsense_naming_the_flag(capsys):
    """--drain-timeout (the coordinator's grace at SIGTERM) and --reconnect-max (the worker's
    backoff cap): what tests/integration/cluster.py sets to keep restarts short."""
    from worker.daemon import WorkerConfig

    _, settings = load(["coordinator", "--drain-timeout", "1"])
    assert config.dataclass_from(CoordinatorConfig, settings).drain_timeout == 1.0
    assert CoordinatorConfig().drain_timeout == 5.0
    _, settings = load(["worker", "--reconnect-max", "0.5"])
    assert config.dataclass_from(WorkerConfig, settings, coordinator="c:1").reconnect_max == 0.5
    assert WorkerConfig(coordinator="c:1").reconnect_max == 5.0
    for argv in (["coordinator", "--drain-timeout", "0"], ["worker", "--reconnect-max", "-1"]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and argv[1] in err and "positive number of seconds" in err, err


def test_every_coordinator_flag_reaches_the_running_coordinator(monkeypatch):
    """A flag whose value the coordinator never sees is worse than none (`--stall-warn` was such a
    one once): each lands in the Config, its core's timings or the server's security."""
    monkeypatch.setenv("RINGLEADER_SHED_LAG", "7")
    _, settings = load(["coordinator", "--stall-warn", "0.05", "--check-hold-after", "30", "--check-hold-share",
                        "0.5", "--heartbeat-timeout", "9", "--forget-worker", "w1", "--insecure"])
    cfg = config.coordinator_config(settings)
    t = config.core_timings(cfg)
    assert (t.stall_warn_s, t.check_hold_after_s, t.check_hold_share, t.heartbeat_timeout_s) == (0.05, 30.0, 0.5, 9.0)
    assert t.shed_lag_s == 7.0  # from the environment
    assert cfg.security.forget_workers == ("w1",) and cfg.security.insecure
    fields = {f.name for f in dataclasses.fields(CoordinatorConfig)}
    security = {"token_file", "worker_token_file", "tls_cert", "tls_key", "tls_client_ca", "insecure",
                "metrics_auth", "forget_worker"}  # read by security_flags.server_security
    assert [a.dest for a in config.own_env_actions(build_parser(), "coordinator")
            if a.dest not in fields | security] == []


def test_the_flags_defaults_are_the_configs(monkeypatch):
    """The Config holds each default once: a coordinator started with no flag and no variable
    is configured as CoordinatorConfig() is."""
    for name in [n for n in os.environ if n.startswith(config.ENV_PREFIX)]:
        monkeypatch.delenv(name)
    _, settings = load(["coordinator"])
    assert config.coordinator_config(settings) == CoordinatorConfig()


def test_the_cores_timings_are_built_from_every_knob_of_the_config():
    """core_timings is the one place the control core's Timings come from: each of its fields
    takes a Config knob (a Timings field the Config cannot set would be a constant nobody can
    change, or a second copy)."""
    from coordinator.core.liveness import Timings

    knobs = {"heartbeat_interval": 1.5, "heartbeat_timeout": 6.5, "reconcile_grace": 16.5, "blame_grace": 3.5,
             "unwell_after": 4.5, "tick": 0.25, "worker_ttl": 601.5, "worker_msgs_per_turn": 257, "pass_ranks": 129,
             "shed_lag": 2.5, "stall_warn": 0.5, "check_hold_after": 61.5, "check_hold_share": 0.25}
    t = config.core_timings(CoordinatorConfig(**knobs))
    defaults = Timings()
    unset = [f.name for f in dataclasses.fields(Timings) if getattr(t, f.name) == getattr(defaults, f.name)]
    assert unset == []
    assert sorted(dataclasses.asdict(t).values()) == sorted(knobs.values())
    assert config.core_timings(CoordinatorConfig()) == Timings()  # the same defaults on both sides


def test_readme_table_of_variables_matches_the_parser():
    readme = (ROOT / "README.md").read_text()
    assert config.readme_block(build_parser()) in readme, \
        "README.md's table of variables is stale: run `scripts/gen-env-table.py`"


# ---- completion -----------------------------------------------------------------------------


def _complete(line: str, tmp_path: Path) -> list[str]:
    """What the shell would offer after `line`, asked of the real command as argcomplete's shell
    function asks it (the _ARGCOMPLETE protocol)."""
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
    p = subprocess.run(ringleader_cmd(), env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return out.read_text().split()


def test_completion_of_subcommands_and_values(tmp_path):
    assert _complete("ringleader sub", tmp_path) == ["submit"]
    assert set(_complete("ringleader --coordinator h:1 wor", tmp_path)) == {"worker", "workers"}
    assert set(_complete("ringleader submit --world-size 2 --op all_", tmp_path)) == {"all_reduce", "all_gather"}
    assert _complete("ringleader jobs --op scat", tmp_path) == ["scatter"]
    assert set(_complete("ringleader submit --reduce-op m", tmp_path)) == {"min", "max"}
    assert set(_complete("ringleader jobs -o ", tmp_path)) == {"json", "table", "wide", "yaml"}


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script(capsys, shell):
    code, out, _ = cli(capsys, "completion", shell)
    assert code == 0
    assert "_ARGCOMPLETE" in out and "ringleader" in out


# ---- log capture (in this process: the executor's own code, a real fd 2) ----------------------


class SentToDaemon:
    """Stands in for the executor's pipe to its daemon (a fake: no daemon in this test)."""

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, msg) -> None:
        self.sent.append(msg)


def _assignment(job_id: str) -> wpb.Assignment:
    spec = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[8]))
    return wpb.Assignment(job_id=job_id, rank=0, world_size=1, backend="gloo", group_key="g1",
                          spec=jobspec.normalize(spec).spec)  # as the coordinator sends it


def _executor(monkeypatch, runner):
    import multiprocessing

    from worker import executor, kinds

    # As in an executor process, sys.stderr writes to fd 2 (pytest's would bypass it).
    monkeypatch.setattr(sys, "stderr", open(2, "w", closefd=False))
    monkeypatch.setitem(kinds.RUNNERS, "collective", runner)
    ex = executor.Executor(SentToDaemon(), "cpu", multiprocessing.Value("q", 0, lock=False))
    ex.group_key = "g1"  # the assignment's group counts as warm: no process group to form here
    return ex


def test_a_rank_that_raises_sends_its_stderr_and_traceback(tmp_path, monkeypatch):
    from worker import api

    def failing(job, ctx):
        print("a warning from Python", file=sys.stderr)
        os.write(2, b"a line written on fd 2, as NCCL writes\n")
        raise RuntimeError("boom in rank 0")

    ex = _executor(monkeypatch, failing)
    path = tmp_path / "j1.rank0.log"
    done = ex.run(api.Run(_assignment("j1").SerializeToString(), str(path)))
    os.write(2, b"after the job\n")
    assert not done.ok and "RuntimeError: boom in rank 0" in done.error
    assert "a warning from Python" in done.log and "a line written on fd 2, as NCCL writes" in done.log
    assert "Traceback (most recent call last)" in done.log and "boom in rank 0" in done.log
    assert "after the job" not in path.read_text()  # fd 2 is the process's own again
    pb_done = done.to_pb(rank=0, executor_restarts=0)
    assert pb_done.log == done.log  # Done.to_pb carries it to the coordinator


def test_a_long_log_keeps_its_tail_and_says_what_was_dropped(tmp_path, monkeypatch):
    from worker import api

    def chatty(job, ctx):
        from worker.kinds import Outcome

        os.write(2, b"x" * (defaults.LOG_TAIL_BYTES + 1000) + b"\nthe last line\n")
        return Outcome()

    ex = _executor(monkeypatch, chatty)
    done = ex.run(api.Run(_assignment("j2").SerializeToString(), str(tmp_path / "j2.log")))
    assert done.ok
    first, rest = done.log.split("\n", 1)
    assert first == f"[ringleader: 1015 earlier bytes dropped; the last {defaults.LOG_TAIL_BYTES} are kept]"
    assert len(rest.encode()) == defaults.LOG_TAIL_BYTES and rest.endswith("\nthe last line\n")


# ---- against a real coordinator and real workers ---------------------------------------------


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    """A coordinator with HTTP and two CPU workers: c0 given --coordinator after `worker`, c1
    configured only by RINGLEADER_* variables."""
    c = Cluster(tmp_path_factory.mktemp("cli"))
    try:
        c.start_coordinator(http=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith(config.ENV_PREFIX)}
        for wid, argv, env in (
            ("c0", ["worker", "--coordinator", c.address, "--worker-id", "c0"], base),
            ("c1", ["worker"], {**base, "RINGLEADER_COORDINATOR": c.address, "RINGLEADER_WORKER_ID": "c1",
                                "RINGLEADER_DEVICE": "cpu"}),
        ):
            with open(c.tmp / f"{wid}.log", "ab") as log:
                c.workers[wid] = subprocess.Popen(ringleader_cmd(*argv), env=env, stdout=log, stderr=log,
                                                  start_new_session=True)
        c.wait_idle(["c0", "c1"], timeout=120)
        yield c
    finally:
        c.close()


def run(cl: Cluster, *argv: str, ok: bool = True) -> subprocess.CompletedProcess:
    """`ringleader ARGV --coordinator ADDRESS` as a separate process."""
    p = subprocess.run(ringleader_cmd(*argv, "--coordinator", cl.address), capture_output=True, text=True,
                       timeout=180)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


@pytest.mark.integration
def test_workers_registered_by_flag_after_subcommand_and_by_variables(cl):
    body = json.loads(run(cl, "workers", "-o", "json").stdout)
    workers = {w["worker_id"]: w for w in body["workers"]}
    assert {"c0", "c1"} <= set(workers) and all(workers[w]["state"] == "IDLE" for w in ("c0", "c1"))
    assert set(workers["c0"]) == {f.name for f in pb.WorkerInfo.DESCRIPTOR.fields}
    table = run(cl, "workers").stdout.splitlines()
    assert table[0].split()[:3] == ["WORKER", "STATE", "DEVICE"]
    assert any(line.startswith("c1 ") and " IDLE " in line for line in table)


def job_document(job: dict) -> dict:
    """The job of an answer: without read_view_age_ms, which is the answer's (how old the edge's
    read view was when it answered, never stored), so two reads of one job may differ in it."""
    age = job.get("read_view_age_ms", 0)
    assert isinstance(age, int) and age >= 0, job
    return {k: v for k, v in job.items() if k != "read_view_age_ms"}


@pytest.mark.integration
def test_job_commands_print_the_documented_json(cl):
    sub = run(cl, "submit", "--op", "all_gather", "--world-size", "2", "--sizes", "1K,64K", "--iters", "3",
              "--warmup", "1", "--wait", "-o", "json")
    body = json.loads(sub.stdout)  # stdout is one JSON document; progress went to stderr
    job_id = body["id"]
    assert body["state"] == "SUCCEEDED"
    assert [r["size_bytes"] for r in body["results"]] == [1024, 65536] and f"[{job_id}]" in sub.stderr
    body = job_document(body)
    assert job_document(json.loads(run(cl, "job", job_id, "--json").stdout)) == body
    watched = run(cl, "watch", job_id, "-o", "json")
    assert job_document(json.loads(watched.stdout)) == body and "SUCCEEDED" in watched.stderr
    listed = json.loads(run(cl, "jobs", "--limit", "1", "-o", "json").stdout)
    assert [j["id"] for j in listed["jobs"]] == [job_id] and "results" not in listed["jobs"][0]
    assert job_document(listed["jobs"][0]) == {k: v for k, v in body.items() if k != "results"}
    assert listed["next_before"] is None or isinstance(listed["next_before"], str)
    listing = run(cl, "jobs", "--op", "all_gather").stdout.splitlines()
    assert listing[0].split()[:2] == ["ID", "STATE"] and listing[1].split()[0] == job_id
    queued = json.loads(run(cl, "submit", "--op", "broadcast", "--world-size", "2", "--host", "nowhere.invalid", "--queue",
                            "-o", "json").stdout)
    assert queued["state"] == "QUEUED"
    assert json.loads(run(cl, "cancel", queued["id"], "-o", "json").stdout)["state"] == "CANCELLED"
    again = run(cl, "cancel", queued["id"], ok=False)
    assert again.returncode == 1 and "failed_precondition" in again.stderr and again.stdout == ""


@pytest.mark.integration
def test_logs_name_a_killed_executor_and_keep_its_peer_log(cl):
    job = cl.submit(workers=["c0", "c1"], op="all_reduce", sizes=[8 << 20], iters=100000, warmup=0)
    cl.wait_job(job.id, states=(pb.RUNNING,))
    time.sleep(1.5)  # inside the timed loop by now
    os.kill(executor_pid(cl.workers["c1"].pid), signal.SIGKILL)
    assert cl.wait_job(job.id, timeout=60).state == pb.FAILED
    deadline = time.monotonic() + 60  # the aborted peer reports its end (and log) just after
    while not all(r.received for r in cl.client.logs(job.id).ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    text = run(cl, "logs", job.id).stdout
    assert "==> rank 0 (c0) <==" in text and "==> rank 1 (c1) <==" in text
    assert text.rstrip().endswith("[ringleader: executor process killed by signal 9]")
    body = json.loads(run(cl, "logs", job.id, "--rank", "0", "-o", "json").stdout)
    assert body["job_id"] == job.id and [r["rank"] for r in body["ranks"]] == [0]
    assert body["ranks"][0]["received"] and body["ranks"][0]["text"]  # its traceback or its abort
    rest = httpx.get(f"{cl.http_url}/api/v1/jobs/{job.id}/logs", timeout=30).json()
    assert rest == json.loads(run(cl, "logs", job.id, "-o", "json").stdout)
    bad_rank = run(cl, "logs", job.id, "--rank", "5", ok=False)
    assert bad_rank.returncode == 2 and "--rank: job" in bad_rank.stderr
    cl.wait_idle(["c0", "c1"], timeout=90)


@pytest.mark.integration
def test_logs_of_an_unknown_job(cl):
    p = run(cl, "logs", "nope", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("ringleader: error: not_found")
    with pytest.raises(grpc.RpcError) as exc:
        cl.client.logs("nope")
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert httpx.get(f"{cl.http_url}/api/v1/jobs/nope/logs", timeout=30).status_code == 404


@pytest.mark.integration
def test_version_endpoint(cl):
    import google.protobuf

    body = httpx.get(f"{cl.http_url}/api/v1/version", timeout=30).json()
    assert body == {"version": __version__, "api_version": "v1", "python": ".".join(map(str, sys.version_info[:3])),
                    "grpc": grpc.__version__, "protobuf": google.protobuf.__version__}


# ---- the demo's last line -------------------------------------------------------------------


@pytest.mark.integration
def test_demo_without_serve_prints_no_dead_link():
    p = subprocess.run(ringleader_cmd("demo", "--max-bytes", "1K"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "dashboard: run with --serve to keep the dashboard up"
    assert "http://" not in p.stdout and " SUCCEEDED " in p.stdout


@pytest.mark.integration
def test_demo_with_serve_prints_a_live_link(tmp_path):
    out = tmp_path / "demo.out"
    with open(out, "w") as f:
        demo = subprocess.Popen(ringleader_cmd("demo", "--max-bytes", "1K", "--serve"), stdout=f,
                                stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (link := [x for x in out.read_text().splitlines() if x.startswith("dashboard: ")]):
            assert demo.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
        url = link[0].split()[1]
        assert url.startswith("http://127.0.0.1:") and "/jobs/" in url, link
        assert httpx.get(url, timeout=30).status_code == 200  # live: the page is served
        base, job_id = url.split("/jobs/")
        assert httpx.get(f"{base}/api/v1/jobs/{job_id}", timeout=30).json()["state"] == "SUCCEEDED"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
