"""Configuration as evidence on GPUs: two daemons, one started with NCCL's peer-to-peer path off
(NCCL_P2P_DISABLE=1, what a lost NVLink or an IOMMU setting does to a host's fast path, set by hand
on one daemon only). It is named with that setting before any job, its fingerprint carries what
NVML and torch say (driver, NCCL, NVLinks), and a 2-rank job never starts mixed: it waits naming
the worker and the setting. A check job crashed by the fault injector (SIGSEGV in one executor)
makes `ringleader check` exit 1 naming it, and only the crashed worker gets the evidence."""

import json
import subprocess
import time

import pytest
from cluster import Cluster, ringleader_cmd
from fleet import GPUS

from ringleader.v1 import jobs_pb2 as pb

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs (separate devices)")]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("drift"))
    try:
        c.start_coordinator()
        c.start_worker("d0", device="cuda:0")
        c.start_worker("d1", device="cuda:1", env={"NCCL_P2P_DISABLE": "1"})
        c.wait_idle(["d0", "d1"], timeout=300)
        yield c
    finally:
        c.close()


def test_the_odd_daemon_is_named_before_its_first_job_and_never_gang_mixed(pair):
    out = subprocess.run(ringleader_cmd("--coordinator", pair.address, "workers", "-o", "json"),
                         capture_output=True, text=True, timeout=60)
    listed = {w["worker_id"]: w for w in json.loads(out.stdout)["workers"]}
    print({w: (listed[w]["fingerprint"], listed[w]["config_drift"]) for w in listed})  # for the run's log
    # Two daemons: a tie, both named, each with its own value.
    assert "NCCL_P2P_DISABLE=1" in listed["d1"]["config_drift"]
    assert "NCCL_P2P_DISABLE=unset" in listed["d0"]["config_drift"]
    sw, topo = listed["d0"]["fingerprint"]["software"], listed["d0"]["fingerprint"]["topology"]
    assert sw["nccl"] and sw["torch"] and sw["driver"] and "nvlink_links" in topo and "pcie_gen" in topo
    job = pair.client.submit(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(
        op="all_reduce", sizes=[1 << 20], iters=2)))
    time.sleep(5)
    waiting = pair.client.get(job.id)
    assert waiting.state == pb.QUEUED and "NCCL_P2P_DISABLE" in waiting.reason, waiting.reason
    pair.client.cancel(job.id)


@pytest.fixture(scope="module")
def crashing(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("crash"))
    try:
        c.start_coordinator()
        c.start_worker("k0", device="cuda:0")
        c.start_worker("k1", device="cuda:1", env={"RINGLEADER_FAULTS": "crash=1", "RINGLEADER_FAULTS_ALLOWED": "tests"})
        c.wait_idle(["k0", "k1"], timeout=300)
        yield c
    finally:
        c.close()


def test_a_crashed_check_job_makes_check_exit_non_zero_naming_it_and_blames_only_the_crashed(crashing):
    out = subprocess.run(ringleader_cmd("--coordinator", crashing.address, "check", "--workers", "k0,k1",
                                        "--kind", "gpu_check", "--timeout", "300"),
                         capture_output=True, text=True, timeout=400)
    print(out.stdout)
    assert out.returncode == 1 and "gpu_check) FAILED" in out.stdout and "signal 11" in out.stdout, out.stdout
    health = {w.worker_id: w.health for w in crashing.client.workers()}
    assert health["k1"].check == "crash" and health["k1"].verdict == pb.SUSPECT
    assert health["k0"].check != "crash"
