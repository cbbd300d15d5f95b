"""bench/control_plane.py run small, as it runs at scale: a real coordinator process, simulated
daemons (bench/simfleet.py) in processes of their own, open-loop user calls. The scenarios must
hold as the bench claims them, so the simulator cannot drift from the daemon's protocol unseen:
a hold job whose group the coordinator never sees formed fails its rendezvous deadline (2 s
here, 30 s by default), and the run is reported invalid."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import control_plane  # noqa: E402
from bench.control_plane import Config  # noqa: E402

pytestmark = pytest.mark.integration


def errors(run: dict) -> int:
    return sum(sum(run[k]["errors"].values()) for k in ("submit", "get", "list_workers"))


def test_deep_queue_scenario_keeps_every_gpu_held_and_the_queue_deep(tmp_path):
    # The holds' deadlines (2 s) pass several times over during the run.
    cfg = Config(workers=200, queue=150, rate=10, duration=6, heartbeat_window=1, hold_timeout_s=2)
    run = asyncio.run(control_plane.run_config(cfg, tmp_path))
    assert run["invalid"] == [], run["invalid"]
    assert run["rendezvous_timeouts"] == 0 and run["jobs_failed"] == 0
    assert isinstance(run["loop_stalls"], list)  # read from the coordinator's log for the measured window
    assert run["queue_depth_end"] >= 150 and run["jobs_running_end"] >= 100  # 100 GPU workers, held
    assert errors(run) == 0 and run["submit"]["n"] > 0


def test_churn_scenario_drains_the_queue_with_no_job_failed(tmp_path):
    # The window is the run's length; the 300 drained in 4.2 s under a load average of 10 on two
    # cores (a run that does not drain within it is invalid, below).
    cfg = Config(workers=200, queue=300, rate=10, duration=10, heartbeat_window=1, hold_timeout_s=2, churn=True)
    run = asyncio.run(control_plane.run_config(cfg, tmp_path))
    print(f"churn: drained in {run['drain_s']} s of {cfg.duration:g}")
    assert run["invalid"] == [], run["invalid"]
    assert run["jobs_finished"]["succeeded"] >= 300 and run["jobs_finished"]["failed"] == 0
    assert run["jobs_finished"]["cancelled"] == 200  # the holds, cancelled to start the drain
    assert run["drain_s"] is not None and run["cpu_ms_per_job"] > 0
    assert errors(run) == 0


def test_a_run_that_lost_its_scenario_is_reported_invalid():
    deep = Config(workers=200, queue=150)
    drained = {"jobs_failed": 12, "queue_depth_end": 3, "jobs_running_end": 0, "workers_declared_lost": 0}
    problems = control_plane.scenario_problems(deep, drained)
    assert any("12 jobs failed" in p for p in problems)
    assert any("did not stay deep: 150 -> 3" in p for p in problems)
    assert any("GPUs were not held" in p for p in problems)
    churn = Config(workers=200, queue=300, churn=True, duration=5)
    stuck = {"jobs_failed": 0, "drain_s": None, "jobs_finished": {"succeeded": 10}, "sweep_jobs": ["FAILED"]}
    problems = control_plane.scenario_problems(churn, stuck)
    assert len(problems) == 3, problems
    idle_sweep = {**stuck, "drain_s": 4.0, "jobs_finished": {"succeeded": 300}, "sweep_jobs": ["QUEUED"] * 4}
    assert control_plane.scenario_problems(churn, idle_sweep) == [
        "the check sweep never started: 4 gang job(s), all still queued"]
