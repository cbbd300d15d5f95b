"""Tokens, roles, exposure and certificates, without servers (the servers: tests/integration/test_auth.py)."""

import os
import stat
import subprocess
import sys

import pytest
from cryptography import x509

from coordinator.edge.auth import USERS, WORKERS, Access, role_of
from coordinator.edge.identity import CertIdentity, cert_identity
from dashboard.guard import Guard, GuardConfig, cross_origin, host_is_local
from ringleader_app.certs import write_cluster_files
from ringleader_app.process import CoordinatorConfig, check_exposure
from ringleader.errors import InvalidSpec, PermissionDenied, Unauthenticated
from ringleader.security import (
    ClientSecurity, ServerSecurity, TlsFiles, bearer, bearer_token, is_loopback, read_token,
)
from starlette.datastructures import Headers

USERS_TOKEN = "u" * 24
WORKERS_TOKEN = "w" * 24


# ---- tokens ----------------------------------------------------------------------------------


def test_token_from_file_wins_over_env_and_is_stripped(tmp_path):
    f = tmp_path / "t"
    f.write_text(f"  {USERS_TOKEN}\n")
    assert read_token(str(f), "X", "--token-file", {"X": "from-env"}) == USERS_TOKEN
    assert read_token("", "X", "--token-file", {"X": " from-env \n"}) == "from-env"
    assert read_token("", "X", "--token-file", {}) == ""


@pytest.mark.parametrize("content,why", [("", "is empty"), ("two words", "without spaces"),
                                         ("tökén", "visible ASCII")])
def test_bad_token_files_name_the_flag(tmp_path, content, why):
    f = tmp_path / "t"
    f.write_text(content)
    with pytest.raises(InvalidSpec) as err:
        read_token(str(f), "X", "--worker-token-file")
    assert err.value.field == "--worker-token-file" and why in str(err.value)


def test_unreadable_token_file_names_flag_and_path(tmp_path):
    with pytest.raises(InvalidSpec) as err:
        read_token(str(tmp_path / "missing"), "X", "--token-file")
    assert str(err.value).startswith("--token-file: cannot read ") and "missing" in str(err.value)


def test_bearer_round_trip():
    assert bearer("") == ()
    assert bearer_token(dict(bearer("abc"))["authorization"]) == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for bad in (None, "", "Basic abc", "Bearer", "abc"):
        assert bearer_token(bad) == ""


def test_server_tokens_must_be_long_and_different():
    with pytest.raises(InvalidSpec, match="at least 16"):
        ServerSecurity(users_token="short")
    with pytest.raises(InvalidSpec, match="--worker-token-file: the workers' token must differ"):
        ServerSecurity(users_token=USERS_TOKEN, workers_token=USERS_TOKEN)


def test_tls_settings_come_in_pairs():
    with pytest.raises(InvalidSpec, match="--tls-key"):
        TlsFiles(cert="c.pem")
    with pytest.raises(InvalidSpec, match="--tls-ca"):
        ClientSecurity(tls=TlsFiles(cert="c.pem", key="k.pem"))
    with pytest.raises(InvalidSpec, match="--tls-client-ca"):
        ServerSecurity(tls=TlsFiles(ca="ca.pem", ca_flag="--tls-client-ca"))


# ---- roles -----------------------------------------------------------------------------------


def test_access_decides_by_role():
    access = Access(USERS_TOKEN, WORKERS_TOKEN)
    access.require(USERS, f"Bearer {USERS_TOKEN}")
    access.require(WORKERS, f"Bearer {WORKERS_TOKEN}")
    with pytest.raises(Unauthenticated, match="no bearer token"):
        access.require(USERS, None)
    with pytest.raises(Unauthenticated, match="invalid token") as err:
        access.require(WORKERS, "Bearer guessed-guessed-guessed")
    assert "guessed" not in str(err.value)  # never echo what was sent
    with pytest.raises(PermissionDenied, match="workers' token: it cannot submit"):
        access.require(USERS, f"Bearer {WORKERS_TOKEN}")
    with pytest.raises(PermissionDenied, match="users' token: it cannot register a worker"):
        access.require(WORKERS, f"Bearer {USERS_TOKEN}")


def test_a_role_without_a_token_is_open_and_the_other_stays_closed():
    access = Access(users_token=USERS_TOKEN)
    access.require(WORKERS, None)
    with pytest.raises(Unauthenticated):
        access.require(USERS, None)


def test_methods_map_to_roles_closed_by_default():
    assert role_of("/ringleader.v1.JobService/SubmitJob") == USERS
    assert role_of("/ringleader.v1.WorkerService/Connect") == WORKERS
    assert role_of("/grpc.health.v1.Health/Check") is None
    assert role_of("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") is None
    assert role_of("/some.Other/Thing") == USERS


# ---- exposure --------------------------------------------------------------------------------


@pytest.mark.parametrize("address,loopback", [
    ("127.0.0.1:50051", True), ("127.0.0.2:1", True), ("[::1]:8080", True), ("localhost:8080", True),
    ("unix:/tmp/x.sock", True), ("0.0.0.0:50051", False), ("[::]:50051", False), (":8080", False),
    ("10.0.0.1:50051", False), ("no-such-host.invalid:1", False)])
def test_is_loopback(address, loopback):
    assert is_loopback(address) is loopback


def test_off_loopback_without_both_tokens_is_refused_naming_what_is_missing():
    with pytest.raises(InvalidSpec) as err:
        check_exposure(CoordinatorConfig(grpc_address="0.0.0.0:50051", http_address=""))
    assert err.value.field == "--grpc-address"
    assert "users' token (--token-file or RINGLEADER_TOKEN)" in str(err.value)
    assert "workers' token (--worker-token-file or RINGLEADER_WORKER_TOKEN)" in str(err.value)
    with pytest.raises(InvalidSpec) as err:
        check_exposure(CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="0.0.0.0:8080",
                                         security=ServerSecurity(users_token=USERS_TOKEN)))
    assert err.value.field == "--http-address" and "users'" not in str(err.value)


def test_exposure_allowed_with_both_tokens_on_loopback_or_insecure():
    both = ServerSecurity(users_token=USERS_TOKEN, workers_token=WORKERS_TOKEN)
    assert check_exposure(CoordinatorConfig(grpc_address="0.0.0.0:1", security=both)) == ""
    assert check_exposure(CoordinatorConfig(grpc_address="127.0.0.1:1", http_address="127.0.0.1:2")) == ""
    warning = check_exposure(CoordinatorConfig(grpc_address="0.0.0.0:1", security=ServerSecurity(insecure=True)))
    assert warning.startswith("--insecure: 0.0.0.0:1 reachable from other hosts without the users' token")


def test_cli_refuses_to_be_open_by_accident_with_exit_2_and_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
    env["RINGLEADER_TOKEN"] = USERS_TOKEN
    p = subprocess.run([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "0.0.0.0:0",
                        "--http-address", "", "--db", ":memory:"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("ringleader: error: --grpc-address: 0.0.0.0:0 is")
    assert "the workers' token (--worker-token-file or RINGLEADER_WORKER_TOKEN) is not set" in p.stderr
    assert USERS_TOKEN not in p.stderr


# ---- the HTTP guard --------------------------------------------------------------------------


def test_cross_origin_is_what_a_browser_says():
    assert not cross_origin(Headers({"host": "127.0.0.1:8080"}))
    assert not cross_origin(Headers({"host": "127.0.0.1:8080", "origin": "http://127.0.0.1:8080"}))
    assert cross_origin(Headers({"host": "127.0.0.1:8080", "origin": "http://evil.example"}))
    assert cross_origin(Headers({"host": "127.0.0.1:8080", "origin": "null"}))
    assert cross_origin(Headers({"host": "127.0.0.1:8080", "origin": "http://[::1"}))  # not a URL
    assert cross_origin(Headers({"host": "127.0.0.1:8080", "sec-fetch-site": "cross-site"}))
    assert not cross_origin(Headers({"host": "127.0.0.1:8080", "sec-fetch-site": "same-origin"}))


@pytest.mark.parametrize("host,local", [("127.0.0.1:8080", True), ("localhost:8080", True), ("[::1]:80", True),
                                        ("10.1.2.3", True), ("evil.example:8080", False), ("", False),
                                        ("[::1", False)])
def test_host_is_local(host, local):
    assert host_is_local(host) is local


def test_guard_refusals_by_path():
    guard = Guard(None, GuardConfig(Access(USERS_TOKEN, WORKERS_TOKEN), metrics_auth=True))
    for path in ("/healthz", "/readyz", "/", "/jobs/abc", "/static/app.js", "/openapi.json"):
        assert guard.refusal(path, Headers({})) is None, path
    assert guard.refusal("/metrics", Headers({}))[0] == 401
    assert guard.refusal("/api/v1/jobs", Headers({}))[0] == 401
    assert guard.refusal("/api/v1/nothing-here", Headers({}))[0] == 401  # closed by default
    assert guard.refusal("/api/v1/jobs", Headers({"authorization": f"Bearer {WORKERS_TOKEN}"}))[0] == 403
    assert guard.refusal("/api/v1/jobs", Headers({"authorization": f"Bearer {USERS_TOKEN}"})) is None
    open_ = Guard(None, GuardConfig(Access(), any_host=False))
    assert open_.refusal("/metrics", Headers({})) is None
    assert open_.refusal("/api/v1/jobs", Headers({"host": "127.0.0.1:1"})) is None
    assert open_.refusal("/api/v1/jobs", Headers({"host": "rebound.example:1"}))[0] == 403


# ---- a spec cannot hang the coordinator ------------------------------------------------------


def test_pairwise_p2p_on_too_many_ranks_is_refused_at_once():
    import time

    from ringleader import jobspec
    from ringleader.v1 import jobs_pb2 as pb

    t0 = time.perf_counter()
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(pb.JobSpec(world_size=65_536, p2p=pb.P2PSpec(pairwise=True, sizes=[8])))
    assert time.perf_counter() - t0 < 1.0
    assert err.value.field == "p2p.pairwise" and f"at most {jobspec.MAX_P2P_ROWS}" in str(err.value)
    assert len(jobspec.normalize(pb.JobSpec(world_size=128, p2p=pb.P2PSpec(pairwise=True, sizes=[8]))).pairs) == 128 * 127


# ---- certificates ----------------------------------------------------------------------------


def test_certs_writes_a_ca_its_certificates_and_two_tokens(tmp_path):
    paths = write_cluster_files(tmp_path / "c", ["10.9.8.7", "coord.example"], workers=["w0", "gpu-3.cuda0"])
    names = {p.name for p in paths}
    assert names == {"ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key", "users.token",
                     "workers.token", "worker-w0.pem", "worker-w0.key", "worker-gpu-3.cuda0.pem",
                     "worker-gpu-3.cuda0.key"}
    for p in paths:
        private = p.suffix in (".key", ".token")
        assert stat.S_IMODE(p.stat().st_mode) == (0o600 if private else 0o644), p
    ca = x509.load_pem_x509_certificate((tmp_path / "c" / "ca.pem").read_bytes())
    server = x509.load_pem_x509_certificate((tmp_path / "c" / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "coord.example" in sans.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} >= {"10.9.8.7", "127.0.0.1"}
    # Each client certificate names one identity and its role (coordinator/edge/identity.py reads it).
    for name, who in (("worker-w0", CertIdentity("worker", "w0")),
                      ("worker-gpu-3.cuda0", CertIdentity("worker", "gpu-3.cuda0")),
                      ("client", CertIdentity("user", "client"))):
        pem = (tmp_path / "c" / f"{name}.pem").read_bytes()
        leaf = x509.load_pem_x509_certificate(pem)
        leaf.verify_directly_issued_by(ca)
        usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usage) == [x509.ExtendedKeyUsageOID.CLIENT_AUTH]
        assert cert_identity(pem) == who
    assert cert_identity((tmp_path / "c" / "server.pem").read_bytes()) == CertIdentity()  # names no one
    tokens = [(tmp_path / "c" / n).read_text().strip() for n in ("users.token", "workers.token")]
    assert tokens[0] != tokens[1] and all(len(t) >= 32 for t in tokens)
    ServerSecurity(*tokens)  # what the coordinator accepts


def test_certs_keeps_existing_files_unless_forced(tmp_path):
    write_cluster_files(tmp_path)
    before = (tmp_path / "ca.pem").read_bytes()
    with pytest.raises(InvalidSpec, match="exists: pass --force"):
        write_cluster_files(tmp_path)
    write_cluster_files(tmp_path, force=True)
    assert (tmp_path / "ca.pem").read_bytes() != before


def test_certs_adds_a_workers_certificate_from_the_existing_ca(tmp_path):
    write_cluster_files(tmp_path, workers=["w0"])
    ca = (tmp_path / "ca.pem").read_bytes()
    assert [p.name for p in write_cluster_files(tmp_path, workers=["w1"])] == ["worker-w1.pem", "worker-w1.key"]
    assert (tmp_path / "ca.pem").read_bytes() == ca
    leaf = x509.load_pem_x509_certificate((tmp_path / "worker-w1.pem").read_bytes())
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))
    with pytest.raises(InvalidSpec, match="worker-w1.pem exists"):
        write_cluster_files(tmp_path, workers=["w1"])
    with pytest.raises(InvalidSpec) as err:
        write_cluster_files(tmp_path / "new", workers=["w/../x"])
    assert err.value.field == "--worker"
