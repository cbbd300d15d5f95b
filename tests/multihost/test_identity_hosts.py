"""Every worker by name, across hosts made of network namespaces.

The coordinator on h0, workers w1-w3 on h1-h3, with both tokens, and with both tokens and mTLS.
h3 plays a compromised host: it holds the workers' token (and w3's certificate) and starts real
worker daemons that try to take w1's id while w1's cable is pulled, or to advertise an address
they do not own. Each is refused with a reason in its own log and counted in the coordinator's
metrics (ringleader_grpc_server_handled_total of Connect by PERMISSION_DENIED); the real w1 comes
back under its own id and runs the next job on its own host. A fake daemon on h3 (liar.py) that
lies about its rank is refused, counted and not freed by its lie, and the honest rank not blamed.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cluster import Cluster, ringleader_cmd
from hostcluster import bed_cluster, cert_flags, wait_until, worker_state
from ringleader_app.certs import worker_files
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

WORKERS = {"w1": "h1", "w2": "h2", "w3": "h3"}
MODES = ("tokens", "tokens+mtls")


@pytest.fixture(scope="module", params=MODES)
def hosts(request, tmp_path_factory):
    with bed_cluster(tmp_path_factory.mktemp(request.param.replace("+", "-")), request.param, WORKERS) as (bed, c):
        yield request.param, bed, c


def refusals(c: Cluster, mode: str) -> float:
    """Registrations the coordinator refused as not the caller's to make, from its /metrics."""
    verify = ssl.create_default_context(cafile=str(c.tmp / "pki" / "ca.pem")) if mode == "tokens+mtls" else True
    text = httpx.get(f"{c.http_url}/metrics", verify=verify, timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ringleader_grpc_server_handled_total{") and 'grpc_method="Connect"' in line
               and 'grpc_code="PERMISSION_DENIED"' in line)


def refused_daemon(c: Cluster, bed, mode: str, worker_id: str, said: str, cert_of: str = "", extra=()) -> str:
    """Start a real daemon on h3 as `worker_id` (with `cert_of`'s certificate under mTLS), wait for
    its log to say `said`, stop it; returns its log."""
    log_path = c.tmp / f"h3-{worker_id}-{cert_of or 'token'}-{len(list(c.tmp.glob('h3-*')))}.log"
    pki, certificate = c.tmp / "pki", []
    if mode == "tokens+mtls":
        certificate = (["--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key")]
                       if cert_of == "client" else cert_flags(pki, cert_of))  # the user's, or a worker's
    flags = [*c.worker_flags, *certificate, *extra]
    with open(log_path, "ab") as log:
        p = subprocess.Popen([*bed.command("h3", []), *ringleader_cmd("--coordinator", c.address, "worker", "--device",
                                                                      "cpu", "--worker-id", worker_id, *flags)],
                             stdout=log, stderr=log, start_new_session=True)
    try:
        wait_until(lambda: said in log_path.read_text(), 90, f"{worker_id} on h3: {said!r} in {log_path}", step=0.2)
    finally:
        p.kill()
        p.wait()
    return log_path.read_text()


def test_a_disconnected_workers_id_cannot_be_taken_and_it_comes_back_as_itself(hosts):
    mode, bed, c = hosts
    c.wait_idle(list(WORKERS), timeout=120)
    before = refusals(c, mode)
    bed.set_link("h1", up=False)
    try:
        wait_until(lambda: worker_state(c, "w1") == pb.DISCONNECTED, 60, "w1 disconnected")
        if mode == "tokens":
            attempts = [("w3", "is bound to another daemon's credential (this one presented none)")]
        else:  # a worker's certificate names its holder; a user's registers no worker
            attempts = [("w3", "register: worker w1: this is worker w3's certificate"),
                        ("client", "register: worker w1: user client's certificate cannot register")]
        for cert_of, said in attempts:
            log = refused_daemon(c, bed, mode, "w1", said, cert_of=cert_of)
            assert "registered with" not in log, log
        assert worker_state(c, "w1") == pb.DISCONNECTED
    finally:
        bed.set_link("h1", up=True)
    wait_until(lambda: worker_state(c, "w1") in (pb.IDLE, pb.BUSY), 60, "w1 back")
    job = c.wait_job(c.submit(workers=["w1", "w2"], op="all_reduce", sizes=[4096, 1 << 20]).id, timeout=180)
    assert job.state == pb.SUCCEEDED, job.reason
    assert [(w.worker_id, w.host) for w in job.workers] == [("w1", "h1"), ("w2", "h2")]
    info = next(w for w in c.client.workers() if w.worker_id == "w1")
    assert (info.host, info.address) == ("h1", bed.ip("h1"))
    assert refusals(c, mode) >= before + len(attempts)  # each at least once (a refused daemon retries)


def test_an_address_a_worker_does_not_own_is_refused_with_what_the_coordinator_sees(hosts):
    mode, bed, c = hosts
    before = refusals(c, mode)
    for advertised in ("127.0.0.1", bed.ip("h1")):  # rank 0 would send its peers to these
        said = (f"register.address: worker w9 advertises '{advertised}', but its connection comes from "
                f"{bed.ip('h3')}: advertise {bed.ip('h3')}, or a name resolving to it")
        refused_daemon(c, bed, mode, "w9", said, cert_of="w9", extra=["--advertise-host", advertised])
    assert "w9" not in {w.worker_id for w in c.client.workers()}
    assert refusals(c, mode) >= before + 2  # each at least once (a refused daemon retries)


def reports_rejected(c: Cluster, mode: str, kind: str) -> float:
    verify = ssl.create_default_context(cafile=str(c.tmp / "pki" / "ca.pem")) if mode == "tokens+mtls" else True
    text = httpx.get(f"{c.http_url}/metrics", verify=verify, timeout=30).text
    prefix = f'ringleader_worker_reports_rejected_total{{kind="{kind}"}} '
    return next((float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix)), 0.0)


def test_a_member_lying_about_its_rank_is_refused_counted_and_not_freed(hosts):
    """A rank that speaks for another (the control core refuses it): rank 1 says it is rank 0 and done."""
    mode, bed, c = hosts
    pki = c.tmp / "pki"
    tls = [str(pki / "ca.pem"), *(str(pki / f) for f in worker_files("liar"))] if mode == "tokens+mtls" else []
    if tls:
        cert_flags(pki, "liar")
    before = reports_rejected(c, mode, "done")
    liar = subprocess.Popen(bed.command("h3", [sys.executable, str(Path(__file__).parent / "liar.py"), c.address,
                                               "liar", bed.ip("h3"), str(pki / "workers.token"), *tls]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert liar.stdout.readline().strip() == "registered"
        c.wait_idle(["w1", "liar"], timeout=60)
        job = c.submit(workers=["w1", "liar"], op="all_reduce", sizes=[4096])
        assert liar.stdout.readline().split() == ["lied", job.id, "1"]
        wait_until(lambda: reports_rejected(c, mode, "done") >= before + 1, 30, "the lie counted", step=0.2)
        while (state := c.client.get(job.id).state) == pb.RUNNING:  # never freed by its own lie
            assert worker_state(c, "liar") == pb.BUSY
            time.sleep(0.2)
        failed = c.client.get(job.id)
        assert state == pb.FAILED, failed.reason
        assert not failed.reason.startswith("rank 0 (worker w1)"), failed.reason  # the honest rank is not blamed
    finally:
        liar.kill()
        liar.wait()
        liar.stdout.close()
    c.wait_idle(["w1"], timeout=60)
    after = c.wait_job(c.submit(workers=["w1", "w2"], op="all_reduce", sizes=[4096]).id, timeout=120)
    assert after.state == pb.SUCCEEDED, after.reason
