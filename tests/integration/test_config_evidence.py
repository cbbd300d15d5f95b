"""Configuration and crashes as evidence, and observe mode, end to end: a real coordinator and CPU
workers (gloo). One worker runs with an NCCL setting its peers lack (gloo ignores it, but it is
reported and compared as it would be on GPUs); one worker's executor crashes (SIGSEGV, the fault
injector) in its first op; a coordinator in observe mode with a slowed worker."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from cluster import Cluster, ringleader_cmd
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

ODD, CRASHER = "c2", "c3"
ENVS = {ODD: {"NCCL_PROTO": "LL"}, CRASHER: {"RINGLEADER_FAULTS": "crash=1", "RINGLEADER_FAULTS_ALLOWED": "tests"}}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("config"))
    try:
        c.start_coordinator(http=True)
        for wid in ("c0", "c1", ODD, CRASHER):
            c.start_worker(wid, env=ENVS.get(wid))
        c.wait_idle(["c0", "c1", ODD, CRASHER])
        yield c
    finally:
        c.close()


def test_the_odd_worker_is_named_with_its_setting_before_any_job_and_never_gang_mixed(fleet):
    # Before any job ran: the CLI's json, the fleet view and GET /api/v1/fleet/health name it.
    out = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers", "-o", "json"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    listed = {w["worker_id"]: w for w in json.loads(out.stdout)["workers"]}
    assert listed[ODD]["config_drift"] == "NCCL_PROTO=LL (3 others: unset)", listed[ODD]
    assert listed[ODD]["fingerprint"]["settings"]["NCCL_PROTO"] == "LL"
    assert listed["c0"]["fingerprint"]["software"]["torch"]  # the executor's versions reached the listing
    assert not listed["c0"].get("config_drift")
    wide = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers", "-o", "wide"),
                          capture_output=True, text=True, timeout=60)
    assert "CONFIG" in wide.stdout and "NCCL_PROTO=LL" in wide.stdout, wide.stdout
    rest = httpx.get(f"{fleet.http_url}/api/v1/workers", timeout=30).json()
    assert {w["worker_id"]: w["config_drift"] for w in rest["workers"]}[ODD] == "NCCL_PROTO=LL (3 others: unset)"
    view = httpx.get(f"{fleet.http_url}/api/v1/fleet", timeout=30).json()
    assert {w["id"]: w.get("cfg") for w in view["workers"]}[ODD] == "NCCL_PROTO=LL (3 others: unset)"
    health = httpx.get(f"{fleet.http_url}/api/v1/fleet/health", timeout=30).json()
    assert [d["worker_id"] for d in health["config_drift"]] == [ODD] and health["observe"] is False
    metrics = httpx.get(f"{fleet.http_url}/metrics", timeout=30).text
    assert 'ringleader_worker_config_drift{part="settings"} 1.0' in metrics

    # A gang that would mix it with the others waits, naming it and the setting; it never starts.
    mixed = fleet.submit(world_size=3, workers=["c0", "c1", ODD], op="all_reduce", sizes=[1024], iters=1)
    time.sleep(3)
    job = fleet.client.get(mixed.id)
    assert job.state == pb.QUEUED and f"{ODD} differs (NCCL_PROTO=LL vs unset)" in job.reason, job.reason
    fleet.client.cancel(mixed.id)
    # A job any matching gang can run runs without it.
    done = fleet.wait_job(fleet.submit(world_size=2, workers=["c0", "c1"], op="all_reduce", sizes=[1024],
                                       iters=1).id)
    assert done.state == pb.SUCCEEDED, done.reason


def test_check_exits_non_zero_naming_the_failed_check_job_and_the_crash_is_evidence(fleet):
    out = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "check", "--workers", f"c0,{CRASHER}",
                                        "--kind", "gpu_check", "--timeout", "150"),
                         capture_output=True, text=True, timeout=200)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "gpu_check) FAILED" in out.stdout and "signal 11" in out.stdout, out.stdout
    assert "0 of 2 workers healthy" in out.stdout, out.stdout
    health = {w.worker_id: w.health for w in fleet.client.workers()}
    assert health[CRASHER].verdict == pb.SUSPECT and health[CRASHER].check == "crash"
    assert "signal 11" in health[CRASHER].figure and "with c0" in health[CRASHER].figure
    assert health["c0"].check != "crash"  # its peer is not blamed for the crash


@pytest.fixture(scope="module")
def observing(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("observe"))
    try:
        c.start_coordinator(http=True, extra=["--health-observe", "--quarantine-max-share", "1"])
        for wid in ("o0", "o1", "o2"):
            c.start_worker(wid, env={"RINGLEADER_FAULTS": "slow_compute=8", "RINGLEADER_FAULTS_ALLOWED": "tests"}
                           if wid == "o2" else None)
        c.wait_idle(["o0", "o1", "o2"])
        yield c
    finally:
        c.close()


def test_observe_mode_gives_the_verdict_and_alert_but_keeps_the_worker_in_user_jobs(observing):
    answer = observing.client.run_check(pb.RunCheckRequest(kinds=["gpu_check"], wait=True, timeout_s=150))
    assert [j.state for j in answer.jobs] == [pb.SUCCEEDED], [j.reason for j in answer.jobs]
    health = {w.worker_id: w.health for w in observing.client.workers()}
    assert health["o2"].verdict == pb.UNHEALTHY and health["o2"].observe_only
    states = {w.worker_id: w.state for w in observing.client.workers()}
    assert states["o2"] != pb.QUARANTINED
    fleet_health = httpx.get(f"{observing.http_url}/api/v1/fleet/health", timeout=30).json()
    assert fleet_health["observe"] is True and fleet_health["quarantined"] == []
    assert any("observe mode: o2 failed gpu_check" in a for a in fleet_health["alerts"]), fleet_health["alerts"]
    listing = subprocess.run(ringleader_cmd("--coordinator", observing.address, "workers"),
                             capture_output=True, text=True, timeout=60)
    assert "UNHEALTHY,observed" in listing.stdout, listing.stdout
    # The failed worker still takes user jobs.
    done = observing.wait_job(observing.submit(world_size=3, op="all_reduce", sizes=[1024], iters=1).id)
    assert done.state == pb.SUCCEEDED and "o2" in {w.worker_id for w in done.workers}, done.reason
