"""A restarted daemon keeps its id only if it kept its credential (--state-dir): real coordinator
and daemon processes on loopback."""

import subprocess
import time

import pytest
from cluster import Cluster, ringleader_cmd
from kept_fleet import KeptWorker, restore, start_kept_fleet

from ringleader.security import ClientSecurity, TlsFiles
from ringleader.states import TERMINAL
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration


def _wait_log(path, said: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while said not in path.read_text():
        # What both sides said: a daemon that never answers is told apart from a refusal unsaid.
        assert time.monotonic() < deadline, (path.read_text()[-2000:] + "\n--- coordinator ---\n"
                                             + path.with_name("coordinator.log").read_text()[-4000:])
        time.sleep(0.1)


@pytest.fixture
def enforcing_cluster(tmp_path):
    """A coordinator with the workers' token: identity enforced (without any token, on loopback,
    a restarted daemon takes its id back: docs/security.md, a trusted single host)."""
    token = tmp_path / "workers.token"
    token.write_text("workers-token-0123456789abcdef\n")
    (tmp_path / "cluster").mkdir()
    c = Cluster(tmp_path / "cluster", worker_flags=["--token-file", str(token)])
    try:
        c.start_coordinator(extra=["--worker-token-file", str(token)])
        yield c
    finally:
        c.close()


def test_a_restarted_daemon_keeps_its_id_with_its_state_dir_and_is_refused_without(enforcing_cluster, tmp_path):
    c = enforcing_cluster
    state = tmp_path / "state"
    c.start_worker("kept", extra=["--state-dir", str(state)])
    c.start_worker("lost")
    c.wait_idle(["kept", "lost"])
    deadline = time.monotonic() + 30  # the daemon writes it once it has read its Registered
    while not state.joinpath("worker-kept.secret").exists():
        assert time.monotonic() < deadline, "no credential file"
        time.sleep(0.05)
    assert [p.name for p in state.iterdir()] == ["worker-kept.secret"]
    assert oct(state.joinpath("worker-kept.secret").stat().st_mode & 0o777) == "0o600"
    # Killed before it acknowledged its secret, "lost" would re-claim its id like a new daemon
    # (coordinator/edge/identity.py): a race this test lost once under load.
    _wait_log(c.tmp / "coordinator.log", "worker lost stored its credential")
    for wid in ("kept", "lost"):
        c.kill_worker(wid)
    c.start_worker("kept", extra=["--state-dir", str(state)])
    c.start_worker("lost")
    c.wait_idle(["kept"])
    _wait_log(c.tmp / "lost.log", "register: worker id lost is bound to another daemon's credential "
                                  "(this one presented none)")
    assert "`ringleader workers approve lost`" in (c.tmp / "lost.log").read_text()
    job = c.wait_job(c.submit(world_size=1, workers=["kept"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason
    # An operator approves its re-claim: the refused daemon, retrying, is let in; no restart.
    approve = subprocess.run(ringleader_cmd("--coordinator", c.address, "workers", "approve", "lost"),
                             capture_output=True, text=True, timeout=60)
    assert approve.returncode == 0, approve.stderr
    assert approve.stdout.startswith("lost: the daemon with fingerprint "), approve.stdout
    c.wait_idle(["lost"], timeout=60)
    job = c.wait_job(c.submit(world_size=1, workers=["lost"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason


@pytest.mark.parametrize("relay", [False, True], ids=["port", "relay"])
def test_with_mtls_a_workers_certificate_is_its_identity(tmp_path, relay):
    """A daemon restarted with no state dir but its own certificate (`ringleader certs --worker ID`)
    comes back under its id; one with the DaemonSet's shared certificate (naming no one) is refused.
    The same through the worker relay: TLS, the token and the client certificate checked there."""
    from ringleader_app.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["certs", str(tmp_path / "pki"), "--k8s", "--worker", "w1"])
    assert exit_.value.code == 0
    pki = tmp_path / "pki"
    c = Cluster(tmp_path, security=ClientSecurity((pki / "users.token").read_text().strip(),
                                                  TlsFiles(str(pki / "ca.pem"), str(pki / "client.pem"),
                                                           str(pki / "client.key"))))

    def worker_flags(cert: str) -> list[str]:
        return ["--worker-token-file", str(pki / "workers.token"), "--tls-ca", str(pki / "ca.pem"),
                "--tls-cert", str(pki / f"{cert}.pem"), "--tls-key", str(pki / f"{cert}.key")]

    try:
        c.start_coordinator(extra=[
            "--token-file", str(pki / "users.token"), "--worker-token-file", str(pki / "workers.token"),
            "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
            "--tls-client-ca", str(pki / "ca.pem")], relay=relay)
        # Killed (the daemon's test-only fault) right after its first registration, before it
        # stored or acknowledged its secret: the certificate that named it holds the id anyway.
        first = c.start_worker("w1", extra=worker_flags("worker-w1"),
                               env={"RINGLEADER_FAULTS": "kill_registration=1", "RINGLEADER_FAULTS_ALLOWED": "tests"})
        assert first.wait(120) == -9
        c.workers.pop("w1")
        c.start_worker("w1", extra=worker_flags("worker"))  # the shared certificate: an impostor
        _wait_log(c.tmp / "w1.log", "register: worker id w1 is bound to another daemon's credential")
        c.kill_worker("w1")
        c.start_worker("w1", extra=worker_flags("worker-w1"))  # its own: back, no secret needed
        c.wait_idle(["w1"])
        job = c.wait_job(c.submit(world_size=1, workers=["w1"], op="all_reduce").id)
        assert job.state == pb.SUCCEEDED, job.reason
    finally:
        c.close()


def test_the_gpu_suites_kill_and_return_sequence_on_cpu_workers(fresh_cluster):
    """tests/gpu's harness (kept_fleet.py) on gloo: a worker killed mid-job fails the job naming
    its rank, the survivor is idle again, the killed one comes back under its id (its --state-dir),
    the next job succeeds; a test that leaves a job running and a worker dead is put right before
    the next, and a fleet that cannot be made whole fails promptly, naming the worker."""
    c = fresh_cluster
    c.start_coordinator()
    fleet = [KeptWorker("k0"), KeptWorker("k1")]
    start_kept_fleet(c, fleet, timeout=120)
    job = c.submit(workers=["k0", "k1"], op="all_reduce", sizes=[1 << 20], iters=100_000, warmup=0)
    done, _ = c.kill_during(job.id, "k1", timeout=120)
    assert done.state == pb.FAILED
    assert "rank 1 (worker k1)" in done.reason, done.reason
    c.wait_idle(["k0"], timeout=120)  # the survivor's executor replaced, or its group dropped
    assert restore(c, fleet) == ["k1"]  # back under its id: the coordinator let it in
    nxt = c.wait_job(c.submit(workers=["k0", "k1"], op="all_reduce", sizes=[4096]).id)
    assert nxt.state == pb.SUCCEEDED, nxt.reason

    # What a failed test may leave: a job running forever and a daemon gone.
    endless = c.submit(workers=["k0", "k1"], op="all_reduce", sizes=[1 << 20], iters=100_000, warmup=0)
    c.wait_job(endless.id, states=(pb.RUNNING,))
    c.kill_worker("k0")
    assert restore(c, fleet) == ["k0"]
    assert c.client.get(endless.id).state in TERMINAL
    nxt = c.wait_job(c.submit(workers=["k0", "k1"], op="all_reduce", sizes=[4096]).id)
    assert nxt.state == pb.SUCCEEDED, nxt.reason

    # A daemon that lost its state dir: on this trusted single host (loopback, no tokens) it takes
    # its id back (docs/security.md), so the fixture restores the fleet as after any restart.
    # Where identity is enforced it is refused (test_identity.py, and the state-dir test above).
    c.kill_worker("k1")
    (c.tmp / "worker-state" / "worker-k1.secret").unlink()
    # Until the coordinator has seen the stream end: before that it still lists the killed k1 as
    # IDLE, and the fleet would look whole (a loaded machine took long enough once to show it).
    deadline = time.monotonic() + 30
    while {w.worker_id: w.state for w in c.client.workers()}.get("k1") == pb.IDLE:
        assert time.monotonic() < deadline, "the coordinator still lists the killed k1 as IDLE after 30 s"
        time.sleep(0.1)
    assert restore(c, fleet) == ["k1"]
    nxt = c.wait_job(c.submit(workers=["k0", "k1"], op="all_reduce", sizes=[4096]).id)
    assert nxt.state == pb.SUCCEEDED, nxt.reason
