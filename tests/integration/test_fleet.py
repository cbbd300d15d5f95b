"""Fleet health end to end: a real coordinator and CPU workers (gloo), one worker started with the
fault injector (slowed compute and a flipped bit); checks through gRPC and the CLI, verdicts,
cordons, and verdicts kept across a coordinator restart."""

from __future__ import annotations

import os
import subprocess
import time

import grpc
import httpx
import pytest

from cluster import Cluster, ringleader_cmd
from ringleader_app.client import Client
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

IDS = ["f0", "f1", "f2", "f3"]
BAD = "f2"
FAULTY = {"RINGLEADER_FAULTS": "slow_compute=8,flip_bit=1", "RINGLEADER_FAULTS_ALLOWED": "tests"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("fleet"))
    try:
        # Every failed worker quarantined: the circuit breaker (its own tests in test_health.py)
        # would keep one of 4 workers of one model at most, and a clean worker's false verdict
        # under a heavy load would then keep the faulty one in service.
        c.start_coordinator(http=True, extra=["--quarantine-max-share", "1"])
        for wid in IDS:
            c.start_worker(wid, env=FAULTY if wid == BAD else None)
        c.wait_idle(IDS)
        yield c
    finally:
        c.close()


def _health(cluster) -> dict[str, pb.WorkerHealth]:
    return {w.worker_id: w.health for w in cluster.client.workers()}


def test_a_worker_asked_for_faults_outside_tests_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RINGLEADER_FAULTS_ALLOWED"}
    out = subprocess.run(ringleader_cmd("--coordinator", "127.0.0.1:9", "worker", "--worker-id", "x"),
                         env={**env, "RINGLEADER_FAULTS": "flip_bit=1"}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "fault injection is for tests only" in out.stderr


def test_checks_name_the_faulty_worker_and_no_other(fleet):
    answer = fleet.client.run_check(pb.RunCheckRequest(wait=True, timeout_s=120))
    assert sorted(j.spec.WhichOneof("kind") for j in answer.jobs) == ["gpu_check", "link_matrix", "sdc_check"]
    for j in answer.jobs:
        assert j.state == pb.SUCCEEDED, j.reason
        assert j.spec.priority == -1000 and sorted(j.spec.placement.worker_ids) == IDS
    by_kind = {j.spec.WhichOneof("kind"): j for j in answer.jobs}
    rank_of = {w.worker_id: w.rank for w in by_kind["gpu_check"].workers}
    # On failure, every rank's figures and bounds: a clean rank flagged says which figure read low.
    gpu = by_kind["gpu_check"].gpu_check
    assert [w.flagged for w in gpu.workers] == [r == rank_of[BAD] for r in range(4)], (rank_of, gpu)
    rank_of = {w.worker_id: w.rank for w in by_kind["sdc_check"].workers}
    sdc = by_kind["sdc_check"].sdc_check
    assert [w.flagged for w in sdc.workers] == [r == rank_of[BAD] for r in range(4)], (rank_of, sdc)
    assert len(by_kind["link_matrix"].link_matrix.links) == 6
    health = {w.worker_id: w.health for w in answer.workers}
    assert health[BAD].verdict == pb.UNHEALTHY and health[BAD].check in ("gpu_check", "sdc_check")
    assert health[BAD].recheck_at > health[BAD].at > 0 and health[BAD].job_id
    assert _health(fleet)[BAD].verdict == pb.UNHEALTHY  # ListWorkers shows it too
    assert answer.named_hosts == []  # the other workers of its host are healthy


def test_cli_check(fleet):
    out = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "check", "--workers", "f0,f1,f3",
                                        "--kind", "gpu_check,sdc_check"), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "3 of 3 workers healthy" in out.stdout and "named hosts: none" in out.stdout
    bad = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "check", "--kind", "nope"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "kinds" in bad.stderr


def test_each_link_of_a_link_check_keeps_its_own_baseline(fleet):
    def samples() -> dict[str, int]:
        return {e.algo: len(e.samples) for e in fleet.client.export_baselines().entries if e.op == "link_matrix"}

    ids = ["f0", "f1", "f3"]
    for _ in range(2):  # the first may be these links' first result (nothing to compare with yet)
        before = samples()
        answer = fleet.client.run_check(pb.RunCheckRequest(worker_ids=ids, kinds=["link_matrix"], wait=True, timeout_s=120))
        job = next(j for j in answer.jobs if j.spec.HasField("link_matrix"))
        assert job.state == pb.SUCCEEDED, job.reason
        after = samples()
        fed = [x for x in job.link_matrix.links if not x.ends_disagree]
        assert set(after) >= {"f0~f1", "f0~f3", "f1~f3"} and sum(after.values()) - sum(before.values()) == len(fed)
    assert all(x.baseline_ratio > 0 for x in fed)  # each against its link's own baseline
    assert "regression" not in job.reason


def test_rest_checks_and_fleet_health(fleet):
    api = f"{fleet.http_url}/api/v1"
    r = httpx.post(f"{api}/checks", json={"worker_ids": ["f0", "f1", "f2"], "kinds": ["sdc_check"], "wait": True,
                                          "sdc_check": {"seed": 3, "rounds": 2}}, timeout=180)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [j["state"] for j in body["jobs"]] == ["SUCCEEDED"] and body["jobs"][0]["spec"]["sdc_check"]["seed"] == 3
    health = {w["worker_id"]: w["health"] for w in body["workers"]}
    assert health["f2"]["verdict"] == "UNHEALTHY" and health["f0"]["verdict"] == "HEALTHY"
    bad = httpx.post(f"{api}/checks", json={"kinds": ["nope"]}, timeout=30)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "kinds"]
    summary = httpx.get(f"{api}/fleet/health", timeout=30).json()
    assert summary["quarantined"] == [BAD] and summary["counts"]["UNHEALTHY"] == 1
    assert [w["worker_id"] for w in summary["attention"]] == [BAD]
    assert httpx.post(f"{api}/workers/nobody/cordon", timeout=30).status_code == 404
    metrics = httpx.get(f"{fleet.http_url}/metrics", timeout=30).text
    assert 'ringleader_worker_verdicts{verdict="unhealthy"} 1.0' in metrics
    assert 'ringleader_worker_verdicts{verdict="healthy"} 3.0' in metrics


def test_verdicts_survive_a_coordinator_restart(fleet):
    before = _health(fleet)[BAD]
    assert before.verdict == pb.UNHEALTHY
    port = int(fleet.address.rsplit(":", 1)[1])
    fleet.stop_coordinator()
    fleet.start_coordinator(port=port, extra=["--quarantine-max-share", "1"])
    fleet.wait_idle([w for w in IDS if w != BAD], timeout=60)
    deadline = time.monotonic() + 60
    while BAD not in _health(fleet) and time.monotonic() < deadline:  # it reconnects with backoff
        time.sleep(0.1)
    assert _health(fleet)[BAD] == before
    assert _state(fleet, BAD) == pb.QUARANTINED  # the coordinator was told again at its start


def _state(cluster, worker_id: str) -> int:
    return next(w.state for w in cluster.client.workers() if w.worker_id == worker_id)


def _out_of_user_jobs(cluster, worker_id: str) -> bool:
    """QUARANTINED, or busy with a check of it (the sweeper's recheck of a failed worker may run)."""
    w = next(w for w in cluster.client.workers() if w.worker_id == worker_id)
    return w.state == pb.QUARANTINED or (w.state == pb.BUSY and cluster.client.get(w.job_id).spec.priority == -1000)


def _run(cluster, world_size: int, workers=()) -> pb.Job:
    done = cluster.wait_job(cluster.submit(world_size=world_size, workers=workers, op="all_reduce", sizes=[1024],
                                           iters=1).id)
    assert done.state == pb.SUCCEEDED, done.reason
    return done


def test_a_failed_worker_gets_no_user_job_until_put_back(fleet):
    fleet.wait_idle([w for w in IDS if w != BAD])
    assert _state(fleet, BAD) == pb.QUARANTINED
    for _ in range(8):
        assert BAD not in {w.worker_id for w in _run(fleet, 3).workers}
    assert _run(fleet, 2, workers=[BAD, "f0"]).state == pb.SUCCEEDED  # named explicitly: for diagnosis
    cordon = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers", "cordon", "f1"),
                            capture_output=True, text=True, timeout=60)
    assert cordon.returncode == 0, cordon.stderr
    assert "CORDONED" in cordon.stdout and _health(fleet)["f1"].cordoned
    listing = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers"), capture_output=True,
                             text=True, timeout=60)
    assert "HEALTH" in listing.stdout and "cordoned" in listing.stdout
    subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers", "uncordon", "f1"), check=True,
                   capture_output=True, timeout=60)
    assert not _health(fleet)["f1"].cordoned and _state(fleet, "f1") == pb.IDLE
    unknown = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers", "cordon", "nobody"),
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 1 and "nobody" in unknown.stderr


    # Uncordon of a worker whose latest verdict failed: a recheck first; --force overrides it.
    kept = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "workers", "uncordon", BAD),
                          capture_output=True, text=True, timeout=60)
    assert kept.returncode == 0 and "a recheck is due now" in kept.stdout, kept.stderr
    assert _health(fleet)[BAD].verdict == pb.UNHEALTHY and _out_of_user_jobs(fleet, BAD)
    before = _health(fleet)[BAD].at
    deadline = time.monotonic() + 90  # the recheck runs within a sweeper round (15 s) and fails it again
    while not (_health(fleet)[BAD].at > before and _state(fleet, BAD) == pb.QUARANTINED) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _health(fleet)[BAD].verdict == pb.UNHEALTHY and _state(fleet, BAD) == pb.QUARANTINED
    put_back = fleet.client.cordon(BAD, on=False, force=True)
    assert put_back.health.verdict == pb.SUSPECT and put_back.state == pb.IDLE
    assert BAD in {w.worker_id for w in _run(fleet, 4).workers}


def test_preflight_certifies_the_gang_and_keeps_a_failing_worker_out(fleet):
    # Run alone (a fresh fleet), BAD is unchecked: the placement pass picks a gang with it, the
    # preflight finds it failing and another worker replaces it. After the tests before it, BAD
    # was put back by hand (SUSPECT): the scheduler prefers the HEALTHY workers.
    client = Client(fleet.address, timeout_s=150)  # the answer waits for the checks
    one = pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1)
    # Up to 300 s: on a heavily loaded machine a clean worker may get a false gpu_check verdict
    # too; the job then waits for that worker's recheck (60 s on, only the failed check).
    done = fleet.wait_job(client.submit(pb.JobSpec(world_size=3, preflight=True, collective=one)).id, timeout=300)
    assert done.state == pb.SUCCEEDED, done.reason
    assert BAD not in {w.worker_id for w in done.workers}
    # Its gang's checks ran at placement, before it started, and the last gang passed both kinds.
    ran = [j for j in fleet.client.list(limit=50).jobs if j.spec.name.endswith(f"of {done.id}")]
    assert all(j.spec.priority == -1000 and j.finished_at <= done.started_at for j in ran)
    last = {j.spec.WhichOneof("kind"): j for j in sorted(ran, key=lambda j: j.created_at)}
    assert set(last) == {"gpu_check", "sdc_check"}
    assert all(sorted(w.worker_id for w in j.workers) == sorted(w.worker_id for w in done.workers)
               and j.state == pb.SUCCEEDED for j in last.values())
    # A job naming the failed worker is accepted and waits for it; its preflight fails it, naming it.
    named = pb.JobSpec(world_size=2, preflight=True, placement=pb.Placement(worker_ids=[BAD, "f0"]), collective=one)
    refused = fleet.wait_job(client.submit(named).id, timeout=300)
    client.close()
    assert refused.state == pb.FAILED and refused.reason.startswith(f"preflight: worker {BAD} failed"), refused.reason
    assert _health(fleet)[BAD].verdict == pb.UNHEALTHY and _out_of_user_jobs(fleet, BAD)
