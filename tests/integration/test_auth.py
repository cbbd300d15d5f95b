"""Tokens and TLS on real processes: a coordinator with both tokens, TLS, client certificates
(mTLS) and /metrics behind the users' token, with two workers that hold the right credentials;
workers, CLI calls and HTTP requests that hold wrong ones; an open coordinator's cross-origin
refusals; the hourly warning of an --insecure one."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cluster import Cluster, executor_pid, ringleader_cmd
from ringleader_app.certs import worker_files, write_cluster_files
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.security import ClientSecurity, ServerSecurity, TlsFiles
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

pytestmark = pytest.mark.integration

NOWHERE = pb.Placement(host="no-such-host")  # a job that stays QUEUED: something to cancel


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """ours/: the cluster's CA, certificates and tokens; other/: the same from another CA."""
    root = tmp_path_factory.mktemp("pki")
    write_cluster_files(root / "ours", workers=["s0", "s1", "no-token", "users-token", "no-cert", "thief", "env"])
    write_cluster_files(root / "other", workers=["other-ca"])
    return root


def token(pki: Path, name: str) -> str:
    return (pki / "ours" / f"{name}.token").read_text().strip()


def client_tls(pki: Path, ca: str = "ours", cert: str = "ours") -> TlsFiles:
    return TlsFiles(str(pki / ca / "ca.pem"), str(pki / cert / "client.pem"), str(pki / cert / "client.key"))


def worker_flags(pki: Path, cert_of: str, certs: str = "ours", token_file: str | None = "workers") -> list[str]:
    """A worker's flags with `cert_of`'s certificate (worker-ID.pem, or client for a user's)."""
    flags = ["--tls-ca", str(pki / "ours" / "ca.pem")]
    if certs:
        pem, key = ("client.pem", "client.key") if cert_of == "client" else worker_files(cert_of)
        flags += ["--tls-cert", str(pki / certs / pem), "--tls-key", str(pki / certs / key)]
    if token_file:
        flags += ["--token-file", str(pki / "ours" / f"{token_file}.token")]
    return flags


@pytest.fixture(scope="module")
def secure(tmp_path_factory, pki):
    ours = pki / "ours"
    c = Cluster(tmp_path_factory.mktemp("secure"), ClientSecurity(token(pki, "users"), client_tls(pki)))
    # Workers get their flags one by one here: some are started with wrong ones.
    try:
        c.start_coordinator(http=True, extra=[
            "--token-file", str(ours / "users.token"), "--worker-token-file", str(ours / "workers.token"),
            "--tls-cert", str(ours / "server.pem"), "--tls-key", str(ours / "server.key"),
            "--tls-client-ca", str(ours / "ca.pem"), "--metrics-auth"])
        for wid in ("s0", "s1"):
            c.start_worker(wid, extra=worker_flags(pki, wid))
        c.wait_idle(["s0", "s1"])
        yield c
    finally:
        c.close()


def test_a_job_runs_with_tokens_and_mtls_and_no_secret_is_kept(secure, pki):
    assert secure.http_url.startswith("https://")
    job = secure.wait_job(secure.submit(workers=["s0", "s1"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason
    assert [r.wrong for r in job.results] == [0, 0]
    secrets = [token(pki, "users").encode(), token(pki, "workers").encode()]
    for kept in (Path(secure.db), *Path(secure.db).parent.glob("*.log")):  # the database and every log
        data = kept.read_bytes()
        assert not any(s in data for s in secrets), kept


def call(target: str, security: ClientSecurity, fn):
    with security.channel(target) as channel:
        return fn(jobs_pb2_grpc.JobServiceStub(channel), channel)


def status_of(target: str, security: ClientSecurity, fn) -> grpc.StatusCode:
    try:
        call(target, security, fn)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def test_grpc_answers_by_role_and_health_and_reflection_stay_open(secure, pki):
    target, tls = secure.address, client_tls(pki)

    def listing(token):
        return lambda stub, _: stub.ListJobs(pb.ListJobsRequest(), timeout=10, metadata=ClientSecurity(token).metadata)

    def submitting(stub, _):
        return stub.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(world_size=1, placement=NOWHERE, collective=pb.CollectiveSpec(
            op="all_reduce"))), timeout=10, metadata=ClientSecurity(token(pki, "workers")).metadata)

    assert status_of(target, ClientSecurity(tls=tls), listing("")) == grpc.StatusCode.UNAUTHENTICATED
    assert status_of(target, ClientSecurity(tls=tls), listing("x" * 40)) == grpc.StatusCode.UNAUTHENTICATED
    assert status_of(target, ClientSecurity(tls=tls), submitting) == grpc.StatusCode.PERMISSION_DENIED
    assert status_of(target, ClientSecurity(tls=tls), listing(token(pki, "users"))) == grpc.StatusCode.OK
    # A worker's certificate never reaches the users' API, whatever token it carries.
    as_worker = ClientSecurity(tls=TlsFiles(str(pki / "ours" / "ca.pem"), *(str(pki / "ours" / f)
                                                                            for f in worker_files("s0"))))
    with pytest.raises(grpc.RpcError) as err:
        call(target, as_worker, listing(token(pki, "users")))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert err.value.details().startswith("this is worker s0's certificate: a worker cannot submit")
    # TLS first: no client certificate, or one from another CA, gets no further than the handshake.
    no_cert = ClientSecurity(tls=TlsFiles(str(pki / "ours" / "ca.pem")))
    assert status_of(target, no_cert, listing(token(pki, "users"))) == grpc.StatusCode.UNAVAILABLE
    foreign = ClientSecurity(tls=client_tls(pki, cert="other"))
    assert status_of(target, foreign, listing(token(pki, "users"))) == grpc.StatusCode.UNAVAILABLE

    anonymous = ClientSecurity(tls=tls)
    health = call(target, anonymous, lambda _, ch: health_pb2_grpc.HealthStub(ch).Check(
        health_pb2.HealthCheckRequest(service="ringleader.v1.JobService"), timeout=10))
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    services = call(target, anonymous, lambda _, ch: list(reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)))
    names = {s.name for s in services[0].list_services_response.service}
    assert {"ringleader.v1.JobService", "ringleader.v1.WorkerService"} <= names


def test_a_worker_certificate_is_refused_on_every_job_service_rpc(secure, pki):
    # Every RPC the service declares (read from its descriptor, so a new one is covered), with an
    # empty request and the users' token: the certificate alone is refused, before anything runs.
    service = pb.DESCRIPTOR.services_by_name["JobService"]
    as_worker = ClientSecurity(token(pki, "users"), TlsFiles(str(pki / "ours" / "ca.pem"), *(
        str(pki / "ours" / f) for f in worker_files("s0"))))
    refused = {}
    with as_worker.channel(secure.address) as channel:
        for method in service.methods:
            request = message_factory.GetMessageClass(method.input_type)()
            answer = message_factory.GetMessageClass(method.output_type)
            path = f"/{service.full_name}/{method.name}"
            kind = channel.unary_stream if method.server_streaming else channel.unary_unary
            rpc = kind(path, request_serializer=type(request).SerializeToString, response_deserializer=answer.FromString)
            try:
                got = rpc(request, timeout=30, metadata=as_worker.metadata)
                list(got) if method.server_streaming else got
                refused[method.name] = "OK"
            except grpc.RpcError as exc:
                refused[method.name] = (exc.code(), exc.details().startswith("this is worker s0's certificate"))
    assert len(refused) == len(service.methods) >= 13
    assert refused == {name: (grpc.StatusCode.PERMISSION_DENIED, True) for name in refused}


def run_cli(secure, pki, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    tls = ["--tls-ca", str(pki / "ours" / "ca.pem"), "--tls-cert", str(pki / "ours" / "client.pem"),
           "--tls-key", str(pki / "ours" / "client.key")]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
    return subprocess.run(ringleader_cmd("--coordinator", secure.address, *args, *tls), capture_output=True,
                          text=True, env={**clean, **(env or {})}, timeout=60)


def test_cli_says_one_line_and_exits_3_when_refused(secure, pki):
    p = run_cli(secure, pki, "jobs")
    assert (p.returncode, p.stdout) == (3, "")
    assert p.stderr.startswith("ringleader: error: unauthenticated: no bearer token") and p.stderr.count("\n") == 1
    p = run_cli(secure, pki, "workers", "--token-file", str(pki / "ours" / "workers.token"))
    assert (p.returncode, p.stdout) == (3, "")
    assert p.stderr == ("ringleader: error: permission_denied: this is the workers' token: it cannot submit, "
                        "cancel or read jobs\n")
    p = run_cli(secure, pki, "workers", env={"RINGLEADER_TOKEN": token(pki, "users")})
    assert p.returncode == 0, p.stderr
    assert "s0" in p.stdout and "s1" in p.stdout


def test_workers_with_wrong_credentials_never_join(secure, pki):
    cases = {  # worker id: (its flags, what its log must say)
        "no-token": (worker_flags(pki, "no-token", token_file=None), "refused this worker: no bearer token"),
        "users-token": (worker_flags(pki, "users-token", token_file="users"),
                        "refused this worker: this is the users' token"),
        "other-ca": (worker_flags(pki, "other-ca", certs="other"),
                     "this worker's certificate (--tls-cert) is issued by"),
        "no-cert": (worker_flags(pki, "no-cert", certs=""), "it may require a client certificate"),
        # Certificates name one identity: another worker's, or a user's, registers nothing.
        "s9": (worker_flags(pki, "thief"), "register: worker s9: this is worker thief's certificate"),
        "s8": (worker_flags(pki, "client"), "register: worker s8: user client's certificate cannot register"),
    }
    for wid, (flags, _) in cases.items():
        secure.start_worker(wid, extra=flags)
    try:
        deadline = time.monotonic() + 120
        for wid, (_, said) in cases.items():
            log = secure.tmp / f"{wid}.log"
            while said not in log.read_text():
                assert time.monotonic() < deadline, f"{wid}: {log.read_text()[-2000:]}"
                time.sleep(0.2)
        assert {w.worker_id for w in secure.client.workers()} == {"s0", "s1"}
    finally:
        for wid in cases:
            secure.kill_worker(wid)


def test_the_workers_token_stays_out_of_the_executors_environment(secure, pki):
    secret = token(pki, "workers")
    daemon = secure.start_worker("env", extra=worker_flags(pki, "env", token_file=None),
                                 env={"RINGLEADER_WORKER_TOKEN": secret, "RINGLEADER_TOKEN": token(pki, "users")})
    try:
        secure.wait_idle(["env"])
        executor = executor_pid(daemon.pid)
        assert secret.encode() in Path(f"/proc/{daemon.pid}/environ").read_bytes()  # the daemon's own
        environ = Path(f"/proc/{executor}/environ").read_bytes()
        assert b"RINGLEADER_WORKER_TOKEN" not in environ and secret.encode() not in environ
        assert token(pki, "users").encode() not in environ
    finally:
        secure.kill_worker("env")


def test_rest_answers_by_role_over_https(secure, pki):
    users, workers = token(pki, "users"), token(pki, "workers")
    queued = secure.client.submit(pb.JobSpec(world_size=1, placement=NOWHERE,
                                             collective=pb.CollectiveSpec(op="all_reduce")))
    trust = ssl.create_default_context(cafile=str(pki / "ours" / "ca.pem"))
    with httpx.Client(base_url=secure.http_url, verify=trust, timeout=30) as http:  # no client certificate
        for path in ("/healthz", "/readyz", "/", f"/jobs/{queued.id}", "/static/app.js"):
            assert http.get(path).status_code == 200, path
        r = http.get("/api/v1/jobs", headers=bearer_header(users))
        assert r.status_code == 401 and r.json()["detail"].startswith("no client certificate")
    trust.load_cert_chain(str(pki / "ours" / "client.pem"), str(pki / "ours" / "client.key"))
    with httpx.Client(base_url=secure.http_url, verify=trust, timeout=30) as http:  # a user's certificate
        r = http.get("/api/v1/jobs")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["detail"].startswith("no bearer token")
        assert http.get("/metrics").status_code == 401  # --metrics-auth
        assert http.get("/metrics", headers=bearer_header(users)).text.startswith("# HELP")
        r = http.get("/api/v1/jobs", headers=bearer_header(workers))
        assert r.status_code == 403 and "workers' token" in r.json()["detail"]
        assert http.get("/api/v1/jobs", headers=bearer_header(users)).status_code == 200
        # Another site's page posting a cancel: no token, so it never reaches the handler.
        r = http.post(f"/api/v1/jobs/{queued.id}/cancel", headers={"origin": "http://evil.example"})
        assert r.status_code == 401
        assert secure.client.get(queued.id).state == pb.QUEUED
        r = http.post(f"/api/v1/jobs/{queued.id}/cancel", headers=bearer_header(users))
        assert r.status_code == 200 and r.json()["state"] == "CANCELLED"
    # plain HTTP on the TLS port: refused, with the URL to use (tests/integration/test_first_hour.py)
    plain = httpx.get(secure.http_url.replace("https://", "http://") + "/healthz", timeout=10)
    assert plain.status_code == 400 and plain.text.startswith("This port speaks HTTPS: use https://")


def bearer_header(value: str) -> dict:
    return {"authorization": f"Bearer {value}"}


# ---- an open coordinator (no tokens, loopback): its own pages only -------------------------------


@pytest.fixture(scope="module")
def open_api(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("open"))
    try:
        c.start_coordinator(http=True)
        with httpx.Client(base_url=c.http_url, timeout=30) as http:
            yield c, http
    finally:
        c.close()


def test_open_coordinator_refuses_cross_origin_requests_before_the_handler(open_api):
    c, http = open_api
    job = http.post("/api/v1/jobs", json={"world_size": 1, "placement": {"host": "nowhere"}, "queue": True,
                                          "collective": {"op": "all_reduce"}}).json()
    cancel = f"/api/v1/jobs/{job['id']}/cancel"
    for headers in ({"origin": "http://evil.example"}, {"origin": "null"}, {"sec-fetch-site": "cross-site"},
                    {"host": "rebound.example"}):  # the last: a DNS-rebinding page
        r = http.post(cancel, headers=headers)
        assert r.status_code == 403, headers
        assert "access-control-allow-origin" not in r.headers
        assert c.client.get(job["id"]).state == pb.QUEUED
    r = http.options(cancel, headers={"origin": "http://evil.example", "access-control-request-method": "POST"})
    assert "access-control-allow-origin" not in r.headers  # no preflight is ever granted
    r = http.post(cancel, headers={"origin": c.http_url})  # the UI's own page
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"


def test_every_response_carries_a_strict_csp(open_api):
    _, http = open_api
    for path in ("/", "/api/v1/workers", "/static/app.js", "/healthz", "/no-such-page"):
        csp = http.get(path).headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert http.get("/docs").status_code == 404  # its page needs a CDN and inline code


# ---- --insecure --------------------------------------------------------------------------------


def test_insecure_warns_at_start_and_again_every_interval(tmp_path, caplog):
    config = CoordinatorConfig(grpc_address="0.0.0.0:0", http_address="", db=str(tmp_path / "jobs.db"),
                               security=ServerSecurity(insecure=True), insecure_warning_s=0.3)

    async def serve_a_while():
        async with RunningCoordinator(config):
            await asyncio.sleep(1.0)

    with caplog.at_level(logging.WARNING, logger="ringleader.coordinator"):
        asyncio.run(serve_a_while())
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--insecure:")]
    assert len(said) >= 3, said  # at start, then every 0.3 s
    assert "reachable from other hosts without the users' token" in said[0]
    assert "the workers' token" in said[0]


def test_cli_insecure_starts_and_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
    p = subprocess.Popen([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "0.0.0.0:0",
                          "--http-address", "", "--db", ":memory:", "--insecure"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("ringleader coordinator: gRPC 0.0.0.0:"), line
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    assert "WARNING ringleader.coordinator: --insecure: 0.0.0.0:" in err
    assert "without TLS" in err
