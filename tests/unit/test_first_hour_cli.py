"""A user's first hour, in-process: nccl-tests' short flags, queue timeouts, the fleet
check at submit, output that tools parse, kubectl-style listings, stable CPU worker ids, TLS
hints, and the web UI's placement label (run by node against the CLI's rule)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader import jobspec
from ringleader import spec as specs
from ringleader import fleet_fit
from ringleader_app import hints, listing, render, table
from ringleader_app.cli import build_parser, main
from ringleader_app.commands import spec_from_args
from ringleader_app.worker_ids import cpu_worker_id
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


def submit(*argv: str) -> pb.JobSpec:
    return spec_from_args(build_parser().parse_args(["submit", *argv]))


def refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["submit", *argv])
    assert exit_.value.code == 2
    return capsys.readouterr().err


# ---- 1. nccl-tests' short flags ---------------------------------------------------------------


def test_short_flags_mean_what_they_mean_in_nccl_tests():
    s = submit("--op", "all_reduce", "-b", "8", "-e", "128M", "-f", "2", "-n", "20", "-w", "5", "-d", "bfloat16",
               "--world-size", "2")
    c = s.collective
    assert (c.min_bytes, c.max_bytes, c.factor, c.iters, c.warmup, c.dtype) == (8, 128 << 20, 2, 20, 5, "bfloat16")
    assert s.world_size == 2


@pytest.mark.parametrize("flag,names", [
    (["-i", "100"], "--sizes"), (["-G", "1"], "--graph"), (["-G"], "--graph"), (["-c", "1"], "always on"),
    (["-g", "8"], "--world-size"), (["-t", "2"], "--world-size"),
])
def test_a_flag_whose_meaning_changed_fails_naming_the_new_one(capsys, flag, names):
    err = refused(capsys, "--op", "all_reduce", "--world-size", "2", *flag)
    assert f"error: {flag[0]}: " in err and names in err


def test_the_old_world_size_letter_says_what_n_is_now(capsys):
    err = refused(capsys, "--op", "all_reduce", "-n", "20", "-w", "5")
    assert err.strip() == ("ringleader: error: --world-size: required: the number of ranks "
                           "(-n is the iteration count, as in nccl-tests)")


def test_o_is_the_output_and_names_the_reduce_op_flag(capsys):
    err = refused(capsys, "--op", "all_reduce", "--world-size", "2", "-o", "max")
    assert "'max'" in err and "--reduce-op" in err


def test_queue_timeout_reaches_the_spec_and_is_validated():
    assert submit("--op", "all_reduce", "--world-size", "2", "--queue-timeout", "90").queue_timeout_s == 90
    assert submit("--op", "all_reduce", "--world-size", "2").queue_timeout_s == 0
    for bad in (-1.0, float("nan"), 8 * 86400.0):
        with pytest.raises(InvalidSpec, match="^queue_timeout_s: "):
            jobspec.normalize(pb.JobSpec(world_size=2, queue_timeout_s=bad, collective=pb.CollectiveSpec(op="all_reduce")))


def _worker(wid: str, backend="gloo", state=pb.IDLE, host="h", dtype="cpu", name="cpu") -> pb.WorkerInfo:
    return pb.WorkerInfo(worker_id=wid, backend=backend, state=state, host=host,
                         device=pb.Device(type=dtype, name=name))


def test_fleet_fit_counts_connected_workers_that_can_run_the_job():
    valid = jobspec.normalize(submit("--op", "all_reduce", "--world-size", "2"))
    two = [_worker("a"), _worker("b", state=pb.BUSY)]
    assert fleet_fit.shortfall(valid, two) == ""
    assert fleet_fit.shortfall(valid, [_worker("a"), _worker("b", state=pb.QUARANTINED)]) == \
        "needs 2 workers: 2 connected, 1 idle, 0 busy, 1 quarantined"
    cordoned = _worker("c", state=pb.QUARANTINED)
    cordoned.health.cordoned = True
    three = jobspec.normalize(submit("--op", "all_reduce", "--world-size", "3"))
    assert fleet_fit.shortfall(three, [_worker("a"), _worker("b", state=pb.QUARANTINED), cordoned]) == \
        "needs 3 workers: 3 connected, 1 idle, 0 busy, 1 quarantined, 1 cordoned"
    mixed = [_worker("a"), _worker("g", backend="nccl", dtype="cuda", name="H200")]
    assert fleet_fit.shortfall(valid, mixed) == "needs 2 workers of one backend, 1 gloo, 1 nccl connected"
    twenty = jobspec.normalize(submit("--op", "all_reduce", "--world-size", "20", "--host", "x"))
    assert fleet_fit.shortfall(twenty, two) == "needs 20 workers, 0 connected matching host=x"


# ---- 7. output that tools parse -------------------------------------------------------------


def _result(size: int, busbw: float) -> pb.SizeResult:
    return pb.SizeResult(op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=size, count=size // 4,
                         busbw_gbps=busbw, algbw_gbps=busbw, world_size=2, iters=5, algo="gloo")


def test_results_table_ends_with_nccl_tests_footer():
    lines = table.results_table([_result(1024, 1.5), _result(2048, 2.5)]).splitlines()
    assert lines[-2] == "# Out of bounds values : 0 OK"
    assert re.fullmatch(r"# Avg bus bandwidth    : 2 ", lines[-1])


def test_size_labels_say_binary_units():
    assert [table.size_label(n) for n in (8, 1024, 64 << 20, 1 << 30, 1536)] == \
        ["8 B", "1KiB", "64MiB", "1GiB", "1536 B"]


def test_json_times_are_rfc3339_and_unreached_times_absent_and_only_the_jobs_kind():
    job = pb.Job(id="j1", state=pb.RUNNING, created_at=86400.25, started_at=86401.0,
                 spec=pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce")))
    doc = table.job_doc(job)
    assert doc["created_at"] == "1970-01-02T00:00:00.250Z" and doc["started_at"] == "1970-01-02T00:00:01.000Z"
    assert "finished_at" not in doc
    assert not {"p2p", "gradient_average", "train", "algo_sweep", "link_matrix", "gpu_check", "sdc_check",
                "stragglers"} & set(doc)
    assert {"spec", "progress", "workers"} <= set(doc)
    trained = pb.Job(id="j2", train=pb.TrainResult(steps=3), spec=pb.JobSpec(world_size=2, train=pb.TrainSpec()))
    assert "train" in table.job_doc(trained)


def test_yaml_is_the_same_document():
    import yaml

    doc = {"jobs": [{"id": "a", "created_at": "2026-11-18T07:06:40.250Z"}], "next_before": None}
    assert yaml.safe_load(render.dump(doc, "yaml")) == doc == json.loads(render.dump(doc, "json"))


def test_listings_have_headers_ages_and_say_when_empty():
    assert listing.jobs_table([]) == "No jobs found."
    assert listing.workers_table([]) == "No workers found."
    job = pb.Job(id="abc", state=pb.QUEUED, created_at=1000.0, reason="needs 20 workers, 2 connected",
                 spec=pb.JobSpec(world_size=20, collective=pb.CollectiveSpec(op="all_reduce", dtype="float32")))
    lines = listing.jobs_table([job], now=1000.0 + 7 * 60).splitlines()
    assert lines[0].split() == ["ID", "STATE", "OP", "DTYPE", "RANKS", "AGE", "REASON"]
    assert lines[1].split()[:6] == ["abc", "QUEUED", "all_reduce", "float32", "20", "7m"]
    assert lines[1].endswith("needs 20 workers, 2 connected")
    wide = listing.jobs_table([job], wide=True, now=1000.0).splitlines()
    assert "CREATED" in wide[0] and "1970-01-01T00:16:40.000Z" in wide[1]
    assert [listing.age(s) for s in (5, 119, 120, 7199, 7200, 172799, 172800)] == \
        ["5s", "119s", "2m", "119m", "2h", "47h", "2d"]


# ---- 5. README and parser agree; stable CPU worker ids ------------------------------------------


def test_every_flag_of_the_readme_table_is_accepted_by_every_command_it_names():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(RINGLEADER_\w+)` \| `(--[\w-]+)` \| ([^|]+) \|", readme, re.M)
    assert len(rows) > 10
    subs = {a.dest: a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)}["command"]
    for _, flag, commands in rows:
        for command in commands.split(","):
            command = command.strip()
            if command != "all":
                assert flag in subs.choices[command]._option_string_actions, (command, flag)


def test_worker_takes_worker_token_file(tmp_path):
    a = build_parser().parse_args(["worker", "--worker-token-file", str(tmp_path / "t")])
    assert a.token_file == str(tmp_path / "t")


def test_cpu_worker_ids_are_stable_and_distinct_without_a_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    script = ("import sys; from ringleader_app.worker_ids import cpu_worker_id; print(cpu_worker_id('hostx'));"
              "sys.stdout.flush(); sys.stdin.read()")
    first = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env=_env(tmp_path))
    try:
        assert first.stdout.readline().strip() == "hostx-cpu0"
        assert cpu_worker_id("hostx") == "hostx-cpu1"  # the first still runs: the next number
    finally:
        first.communicate("")
    # the first one left: a restarted worker takes its number again
    again = subprocess.run([sys.executable, "-c", script], input="", capture_output=True,
                           text=True, cwd=ROOT, env=_env(tmp_path))
    assert again.stdout.strip() == "hostx-cpu0"


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}


# ---- 6. TLS hints -----------------------------------------------------------------------------


def test_tls_hints_follow_the_flags_given():
    def ns(ca="", cert=""):
        return argparse.Namespace(tls_ca=ca, tls_cert=cert)

    assert hints.unavailable("failed to connect: Connection refused", ns()) == ""
    assert "--tls-ca" in hints.unavailable("Socket closed", ns())
    assert "--tls-cert and --tls-key" in hints.unavailable("Socket closed", ns(ca="ca.pem"))
    assert "--tls-ca signed" in hints.unavailable("Ssl handshake failed", ns(ca="ca.pem", cert="c.pem"))


# ---- 3. the UI's placement label is the CLI's ----------------------------------------------------


@pytest.mark.skipif(not shutil.which("node"), reason="needs node to run the web UI's function")
def test_ui_placement_label_matches_the_cli_rule():
    source = (ROOT / "dashboard" / "static" / "app.js").read_text()
    fn = re.search(r"const placement = \(op, inPlace, algo\) => \{.*?\n  \};", source, re.S).group(0)
    cases = [(op, ip, algo) for op in specs.OPS for ip in (False, True) for algo in ("", "symm:one_shot")]
    script = fn + f"\nconsole.log(JSON.stringify({json.dumps(cases)}.map(([o, i, a]) => placement(o, i, a))));"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60, check=True).stdout
    expected = ["in-place" if specs.physically_in_place(*c) else "out-of-place" for c in cases]
    assert json.loads(out) == expected
    # what the UI labels and what it matches a compared job's rows on
    assert 'c.in_place ? "in-place" : "out-of-place"' not in source
    assert "match: (r) => `${r.op}|${r.size_bytes}`" in source


# ---- 2. one GPU is a real demo ----------------------------------------------------------------


def test_demo_plan_shares_one_gpu_between_labelled_ranks():
    from ringleader_app.demo import plan

    one = plan(1)
    assert [d for d, _, _ in one.workers] == ["cuda:0"] * 4
    assert len({env["NCCL_HOSTID"] for _, env, _ in one.workers}) == 4  # NCCL sees separate hosts
    assert len({wid for _, _, wid in one.workers}) == 4 and all(wid for _, _, wid in one.workers)
    assert "sharing one GPU" in one.label and "socket transport" in one.label
    assert len(plan(1, shared_ranks=2).workers) == 2
    assert [d for d, _, _ in plan(8).workers] == [f"cuda:{i}" for i in range(8)]
    cpu = plan(0)
    assert [d for d, _, _ in cpu.workers] == ["cpu", "cpu"] and "gloo" in cpu.label


def test_gpus_are_counted_by_a_child_only_where_a_gpu_driver_node_exists(monkeypatch):
    from ringleader_app import demo

    asked = []

    def child(argv, **kwargs):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="3\n")

    monkeypatch.setattr(demo.subprocess, "run", child)
    monkeypatch.setattr(demo, "GPU_DRIVER_NODES", ("/nonexistent/nvidiactl",))
    assert demo.visible_gpu_count() == 0 and asked == []  # no driver: no torch import at all
    monkeypatch.setattr(demo, "GPU_DRIVER_NODES", ("/nonexistent/nvidiactl", os.devnull))
    assert demo.visible_gpu_count() == 3 and len(asked) == 1


def test_demo_refuses_a_single_shared_rank(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--shared-ranks", "1"])
    assert exit_.value.code == 2 and "at least 2" in capsys.readouterr().err


# ---- bad values are one line, every -o choice honoured, every flag explained ---------


@pytest.mark.parametrize("argv,names", [
    (["--world-size", "-1"], "world_size: must be between 1 and"), (["--world-size", "2", "-n", "0"], "--iters"),
    (["--world-size", "2", "-w", "-1"], "--warmup"), (["--world-size", "2", "-b", "1X"], "--min-bytes"),
    (["--world-size", "2", "-g", "2"], "--world-size"),
])
def test_a_bad_value_is_one_line_and_exit_2_not_a_usage_or_a_traceback(capsys, argv, names):
    err = refused(capsys, "--op", "all_reduce", *argv)
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(("ringleader submit: error: ", "ringleader: error: ")) and names in err
    assert "usage:" not in err and "Traceback" not in err


def _parsers(p: argparse.ArgumentParser):
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_flag_in_help_has_a_line_of_help():
    missing = [f"{p.prog} {'/'.join(a.option_strings) or a.dest}" for p in _parsers(build_parser())
               for a in p._actions if a.help != argparse.SUPPRESS and not (a.help or "").strip()
               and not isinstance(a, argparse._SubParsersAction)]
    assert not missing, missing


@pytest.mark.parametrize("command", [["check"], ["localize", "JOB"], ["baselines", "export", "-"]])
def test_wide_is_not_offered_where_nothing_is_wider(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "-o", "wide"])
    assert exit_.value.code == 2 and "invalid choice: 'wide'" in capsys.readouterr().err


def test_baselines_print_as_a_table_when_asked():
    from ringleader_app.baseline_cmds import baselines_table

    assert baselines_table(pb.BaselineTable()) == "No baselines found.\n"
    entry = pb.BaselineEntry(gpu_model="H200", op="all_reduce", dtype="float32", size_bucket=1 << 20, ranks=8,
                             hosts=1, link="local", mode="eager", samples=[1.0, 2.0, 3.0], median_busbw_gbps=2.0,
                             mad_busbw_gbps=0.5)
    header, row = baselines_table(pb.BaselineTable(entries=[entry])).splitlines()
    assert header.split()[:3] == ["GPU", "OP", "DTYPE"]
    assert row.split() == ["H200", "all_reduce", "float32", "1MiB", "8", "1", "local", "eager", "2.00", "0.50", "3"]


def test_auto_iters_read_auto_in_documents():
    import yaml

    job = pb.Job(id="j", spec=pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", iters=0)))
    assert "iters: auto" in render.dump(table.job_doc(job), "yaml")
    job.spec.collective.iters = 7
    assert yaml.safe_load(render.dump(table.job_doc(job), "yaml"))["spec"]["collective"]["iters"] == 7


def test_p2p_without_pairwise_on_three_ranks_is_warned_about():
    from ringleader_app.commands import idle_ranks

    three = jobspec.normalize(submit("--kind", "p2p", "--world-size", "3"))
    assert idle_ranks(three) == ("p2p without --pairwise measures ranks 0 and 1 only; 1 of 3 ranks stay idle: "
                                 "add --pairwise for every pair, or --world-size 2")
    assert idle_ranks(jobspec.normalize(submit("--kind", "p2p", "--world-size", "3", "--pairwise"))) == ""
    assert idle_ranks(jobspec.normalize(submit("--kind", "p2p", "--world-size", "2"))) == ""


def _state(state: int, reason: str) -> pb.JobEvent:
    return pb.JobEvent(job_id="j", state=pb.StateChange(state=state, reason=reason))


def test_wait_does_not_begin_with_a_queue_the_job_never_waited_in(monkeypatch):
    import io
    import time

    from ringleader_app import follow

    monkeypatch.setattr(follow, "QUEUED_GRACE_S", 0.05)
    out = io.StringIO()
    printer = follow._Printer("j", out)
    printer.event(_state(pb.QUEUED, "waiting for workers"))
    printer.event(_state(pb.RUNNING, "placed"))
    assert out.getvalue() == "[j] RUNNING: placed\n"
    printer.event(_state(pb.QUEUED, "needs 4 workers, 2 idle"))  # a job that really waits is told so
    time.sleep(0.06)
    printer.held()
    assert out.getvalue().splitlines()[-1] == "[j] QUEUED: needs 4 workers, 2 idle"


def test_sweep_progress_names_every_size_as_it_starts():
    import io

    from ringleader_app import follow

    out = io.StringIO()
    printer = follow._Printer("j", out)
    for done, size in enumerate((8, 1 << 20, 64 << 20)):
        printer.event(pb.JobEvent(job_id="j", progress=pb.Progress(done=done, total=12, size_bytes=size)))
    assert out.getvalue().splitlines() == ["[j]  1/12       8 B  running", "[j]  2/12      1MiB  running",
                                           "[j]  3/12     64MiB  running"]


def test_check_json_is_lean_like_job_json():
    from ringleader_app.check_cmds import check_doc

    job = pb.Job(id="c1", created_at=86400.0, link_matrix=pb.LinkMatrixResult(size_bytes=512 << 10),
                 spec=pb.JobSpec(world_size=2, link_matrix=pb.LinkMatrixSpec()))
    doc = check_doc(pb.RunCheckResponse(jobs=[job], named_hosts=["h3"]))
    assert doc["jobs"][0] == table.job_doc(job)
    assert "p2p" not in doc["jobs"][0] and doc["jobs"][0]["created_at"] == "1970-01-02T00:00:00.000Z"
    assert doc["named_hosts"] == ["h3"]


def test_localize_probes_are_hidden_from_jobs_unless_asked_then_listed_under_their_job():
    def job(jid, parent=""):
        return pb.Job(id=jid, created_at=1000.0, spec=pb.JobSpec(world_size=2, parent_id=parent,
                                                                  collective=pb.CollectiveSpec(op="all_reduce")))

    page = pb.ListJobsResponse(jobs=[job("p2", "slow"), job("other"), job("p1", "slow"), job("slow"), job("x", "gone")])
    hidden = pb.ListJobsResponse()
    hidden.CopyFrom(page)
    listing.group_probes(hidden.jobs, keep=False)
    assert [j.id for j in hidden.jobs] == ["other", "slow"]
    listing.group_probes(page.jobs, keep=True)
    assert [j.id for j in page.jobs] == ["other", "slow", "p2", "p1", "x"]
    rows = listing.jobs_table(page.jobs, now=1000.0).splitlines()
    assert rows[3].startswith("└ p2 ") and rows[2].startswith("slow ")
    assert build_parser().parse_args(["jobs", "--probes"]).probes


def test_a_job_no_connected_backend_can_run_names_its_field_not_the_world_size():
    """As the coordinator's admission does, so the CLI and REST name the same field."""
    two = [_worker("a"), _worker("b")]
    avg = jobspec.normalize(submit("--op", "all_reduce", "--world-size", "2", "-d", "int32", "--reduce-op", "avg"))
    with pytest.raises(InvalidSpec) as err:
        fleet_fit.check(avg, two, "add --queue")
    assert err.value.field == "collective.reduce_op"
    big = jobspec.normalize(submit("--op", "all_reduce", "--world-size", "3"))
    with pytest.raises(InvalidSpec, match=r"^world_size: the connected workers cannot run this job: "
                                          r"needs 3 workers, 2 connected; add --queue$"):
        fleet_fit.check(big, two, "add --queue")
    fleet_fit.check(jobspec.normalize(submit("--op", "all_reduce", "--world-size", "2")), two, "add --queue")


def test_a_heartbeat_timeout_shorter_than_two_beats_is_refused_and_a_longer_one_reaches_the_core(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["coordinator", "--heartbeat-timeout", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "at least 2 seconds" in err and len(err.strip().splitlines()) <= 2, err
    from ringleader_app.process import CoordinatorConfig, RunningCoordinator
    coord = RunningCoordinator(CoordinatorConfig(db=":memory:", heartbeat_timeout=30))
    assert coord.core.timings.heartbeat_timeout_s == 30
    coord.store.close()


def test_the_baselines_table_lists_sizes_in_numeric_order():
    from ringleader_app.baseline_cmds import baselines_table

    entries = [pb.BaselineEntry(gpu_model="H200", op="all_reduce", dtype="float32", size_bucket=size, ranks=2,
                                hosts=1, link="nvl", mode="eager") for size in (1024, 64 << 20, 8, 512, 1 << 20)]
    rows = baselines_table(pb.BaselineTable(entries=entries)).splitlines()[1:]
    assert [row.split()[3:5] for row in rows] == [["8", "B"], ["512", "B"], ["1KiB", "2"], ["1MiB", "2"], ["64MiB", "2"]]


def test_submit_help_names_the_device_types_readably(capsys):
    with pytest.raises(SystemExit):
        main(["submit", "--help"])
    text = capsys.readouterr().out
    assert "{,cuda,cpu}" not in text and "--device-type {cuda,cpu}" in text
