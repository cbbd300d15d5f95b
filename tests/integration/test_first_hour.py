"""A user's first hour, against a real coordinator (with its dashboard) and two real
CPU workers: a job the fleet cannot hold is refused unless queued, and then shows its live
waiting reason; closed pipes are quiet; listings and documents that tools parse; job-id
completion; `logs -f`; a kept-alive HTTP connection answers at once; large JSON is gzipped; TLS
mistakes get a hint, and plain HTTP to the HTTPS port gets a clear 400."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import signal
import time
from pathlib import Path

import httpx
import pytest

from cluster import Cluster, ringleader_cmd, running
from ringleader_app.certs import write_cluster_files
from dashboard.bearer import BEARER
from ringleader.v1 import jobs_pb2 as pb

BEARER_DESCRIPTION = BEARER.model.description

pytestmark = pytest.mark.integration

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    with running(tmp_path_factory.mktemp("firsthour"), ["w0", "w1"], http=True) as c:
        yield c


@pytest.fixture(scope="module")
def done_job(two) -> pb.Job:
    job = two.submit(op="all_reduce", sizes=[1024, 4096], iters=3, warmup=1)
    return two.wait_job(job.id)


def cli(c: Cluster, *argv: str, **kwargs) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
    return subprocess.run(ringleader_cmd("--coordinator", c.address, *argv), capture_output=True, text=True,
                          timeout=120, env=clean, **kwargs)


def test_a_job_the_fleet_cannot_hold_is_refused_unless_queued_then_says_why_it_waits(two):
    p = cli(two, "submit", "--op", "all_reduce", "-b", "8", "-e", "128M", "-f", "2", "-n", "20", "-w", "5",
            "--world-size", "20")
    assert p.returncode == 2 and p.stdout == ""
    assert "needs 20 workers, 2 connected" in p.stderr and "--queue" in p.stderr
    p = cli(two, "submit", "--op", "all_reduce", "--world-size", "20", "--queue", "--queue-timeout", "600", "-o", "json")
    assert p.returncode == 0, p.stderr
    job = json.loads(p.stdout)
    assert job["state"] == "QUEUED" and job["spec"]["queue_timeout_s"] == 600
    assert RFC3339.match(job["created_at"]) and "finished_at" not in job and "started_at" not in job
    with open(two.tmp / "watch.out", "w+") as out:
        watch = subprocess.Popen(ringleader_cmd("--coordinator", two.address, "watch", job["id"]), stdout=out,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while "QUEUED: needs 20 workers, 2 connected" not in Path(out.name).read_text():
                assert time.monotonic() < deadline, Path(out.name).read_text()
                time.sleep(0.2)
            two.client.cancel(job["id"])
            assert watch.wait(timeout=30) == 1  # the job did not succeed
        finally:
            watch.kill()


def _into_closed_pipe(c: Cluster, *argv: str) -> subprocess.CompletedProcess:
    """`ringleader ARGV | head -0`: its stdout is a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(ringleader_cmd("--coordinator", c.address, *argv), stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [["jobs"], ["watch"], ["workers", "-o", "json"]])
def test_a_closed_pipe_ends_the_command_quietly(two, done_job, argv):
    argv = [*argv, done_job.id] if argv == ["watch"] else argv
    p = _into_closed_pipe(two, *argv)
    assert (p.returncode, p.stderr) == (141, "")


def test_listings_and_documents(two, done_job):
    assert cli(two, "jobs", "--op", "sendrecv").stdout == "No jobs found.\n"
    lines = cli(two, "jobs", "-o", "wide").stdout.splitlines()
    assert lines[0].split()[:6] == ["ID", "STATE", "OP", "DTYPE", "RANKS", "AGE"] and "WORKERS" in lines[0]
    shown = cli(two, "job", done_job.id).stdout
    assert "\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : " in shown
    import yaml

    doc = yaml.safe_load(cli(two, "job", done_job.id, "-o", "yaml").stdout)
    again = json.loads(cli(two, "job", done_job.id, "-o", "json").stdout)
    assert _but_age(doc) == _but_age(again)
    assert all(RFC3339.match(doc[k]) for k in ("created_at", "started_at", "finished_at"))
    assert not {"p2p", "train", "gradient_average", "algo_sweep"} & set(doc)


def test_job_ids_complete(two, done_job, tmp_path):
    line = f"ringleader --coordinator {two.address} job {done_job.id[:3]}"
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
    subprocess.run(ringleader_cmd(), env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done_job.id in out.read_text().split()


def test_logs_follow_waits_for_the_job_and_its_ranks(two):
    job = two.submit(op="all_reduce", sizes=[1 << 20], iters=20, warmup=1)
    p = cli(two, "logs", "-f", job.id)
    assert p.returncode == 0, p.stderr
    assert "==> rank 0 (" in p.stdout and "==> rank 1 (" in p.stdout and "no log" not in p.stdout
    assert f"[{job.id}] SUCCEEDED" in p.stderr


def _timed_gets(url: str, path: str, n: int) -> list[float]:
    host, port = url.split("//")[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            assert response.status == 200 and response.getheader("connection", "") != "close"
            times.append(time.perf_counter() - start)
    finally:
        conn.close()
    return times


@pytest.mark.parametrize("path", ["/static/style.css", "/api/v1/version"])
def test_a_kept_alive_connection_answers_without_the_delayed_ack_wait(two, path):
    # Without TCP_NODELAY every request after the first waits for the client's delayed ACK:
    # about 40 ms on Linux, against about a millisecond here.
    later = _timed_gets(two.http_url, path, 6)[1:]
    assert statistics.median(later) < 0.02, later


def test_large_json_is_gzipped_for_clients_that_accept_it(two):
    plain = httpx.get(f"{two.http_url}/openapi.json", headers={"Accept-Encoding": "identity"}, timeout=30)
    assert plain.headers.get("content-encoding") is None
    with httpx.stream("GET", f"{two.http_url}/openapi.json", headers={"Accept-Encoding": "gzip"}, timeout=30) as r:
        raw = b"".join(r.iter_raw())
        assert r.headers["content-encoding"] == "gzip"
    assert len(raw) < len(plain.content) / 3
    assert json.loads(gzip.decompress(raw)) == plain.json()


# ---- TLS mistakes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mtls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mtls")
    write_cluster_files(tmp / "pki")
    pki = tmp / "pki"
    c = Cluster(tmp)
    try:
        c.start_coordinator(http=True, extra=[
            "--token-file", str(pki / "users.token"), "--worker-token-file", str(pki / "workers.token"),
            "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
            "--tls-client-ca", str(pki / "ca.pem")])
        yield c, pki
    finally:
        c.close()


def test_a_client_without_a_certificate_is_told_to_give_one(mtls):
    c, pki = mtls
    p = cli(c, "jobs", "--tls-ca", str(pki / "ca.pem"), "--token-file", str(pki / "users.token"))
    assert p.returncode == 1 and "hint:" in p.stderr and "--tls-cert and --tls-key" in p.stderr
    p = cli(c, "jobs", "--token-file", str(pki / "users.token"))
    assert p.returncode == 1 and "give --tls-ca" in p.stderr


def test_plain_http_to_the_https_port_gets_a_clear_400(mtls):
    c, pki = mtls
    port = int(c.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(f"This port speaks HTTPS: use https://127.0.0.1:{port}/\n".encode())
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    assert httpx.get(f"{c.http_url}/healthz", verify=context, timeout=30).text == "ok"  # HTTPS still served


def test_openapi_declares_the_bearer_scheme_on_every_api_operation(two):
    doc = httpx.get(f"{two.http_url}/openapi.json", timeout=30).json()
    assert doc["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http", "scheme": "bearer", "description": BEARER_DESCRIPTION}
    operations = [op for path, item in doc["paths"].items() if path.startswith("/api/v1/") for op in item.values()]
    # optional ({} first): a coordinator without a users' token serves the API open on loopback
    assert operations and all(op.get("security") == [{}, {"HTTPBearer": []}] for op in operations)


def test_a_worker_with_the_daemonsets_shared_certificate_joins(tmp_path):
    """`ringleader certs DIR --k8s`: the coordinator's certificate and the DaemonSet's shared
    worker certificate (naming no one) let a worker register over mTLS with the workers' token."""
    from ringleader_app.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["certs", str(tmp_path / "pki"), "--k8s"])
    assert exit_.value.code == 0
    pki = tmp_path / "pki"
    c = Cluster(tmp_path)
    try:
        c.start_coordinator(extra=[
            "--token-file", str(pki / "users.token"), "--worker-token-file", str(pki / "workers.token"),
            "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
            "--tls-client-ca", str(pki / "ca.pem")])
        c.start_worker("k0", extra=["--worker-token-file", str(pki / "workers.token"), "--tls-ca", str(pki / "ca.pem"),
                                    "--tls-cert", str(pki / "worker.pem"), "--tls-key", str(pki / "worker.key")])
        p = cli(c, "workers", "-o", "json", "--token-file", str(pki / "users.token"), "--tls-ca", str(pki / "ca.pem"),
                "--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key"))
        deadline = time.monotonic() + 90
        while '"IDLE"' not in p.stdout and time.monotonic() < deadline:
            time.sleep(0.5)
            p = cli(c, "workers", "-o", "json", "--token-file", str(pki / "users.token"), "--tls-ca",
                    str(pki / "ca.pem"), "--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key"))
        assert [w["worker_id"] for w in json.loads(p.stdout)["workers"] if w["state"] == "IDLE"] == ["k0"], p.stderr
    finally:
        c.close()


# ---- one behaviour on every interface (the CLI and REST, the same cluster) ----------


def _rest_refusal(c: Cluster, body: dict) -> tuple[list, str]:
    r = httpx.post(f"{c.http_url}/api/v1/jobs", json=body, timeout=30)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    return error["loc"], error["msg"]


@pytest.mark.parametrize("argv,body,why", [
    (["--world-size", "20"], {"world_size": 20}, "needs 20 workers, 2 connected"),
    (["--world-size", "2", "--host", "elsewhere"], {"world_size": 2, "placement": {"host": "elsewhere"}},
     "needs 2 workers, 0 connected matching host=elsewhere"),
])
def test_cli_and_rest_refuse_the_same_job_for_the_same_reason_unless_queued(two, argv, body, why):
    p = cli(two, "submit", "--op", "all_reduce", *argv)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith(f"ringleader: error: world_size: the connected workers cannot run this job: {why}; ")
    body = {**body, "collective": {"op": "all_reduce"}}
    loc, msg = _rest_refusal(two, body)
    assert loc == ["body", "world_size"]
    assert msg.startswith(f"the connected workers cannot run this job: {why}; ") and '"queue": true' in msg  # loc names the field
    queued = httpx.post(f"{two.http_url}/api/v1/jobs", json={**body, "queue": True}, timeout=30)
    assert queued.status_code == 201 and queued.json()["state"] == "QUEUED", queued.text
    assert why in queued.json()["reason"] or queued.json()["reason"] == "waiting for workers"
    two.client.cancel(queued.json()["id"])


def _but_age(doc: dict) -> dict:
    """A job's document but the read view's age, which is each read's own (0, left out, or a few
    ms): two reads of one job are otherwise the same."""
    return {k: v for k, v in doc.items() if k != "read_view_age_ms"}


def test_cli_json_and_the_rest_document_of_a_job_are_the_same(two, done_job):
    shown = json.loads(cli(two, "job", done_job.id, "-o", "json").stdout)
    rest = httpx.get(f"{two.http_url}/api/v1/jobs/{done_job.id}", timeout=30).json()
    assert _but_age(shown) == _but_age(rest)  # field for field: one serializer (ringleader/leanjson.py)
    assert RFC3339.match(rest["created_at"]) and RFC3339.match(rest["finished_at"])
    assert not {"p2p", "train", "gradient_average", "algo_sweep", "link_matrix", "gpu_check", "sdc_check"} & set(rest)
    assert rest["spec"]["collective"]["iters"] == 3
    listed = httpx.get(f"{two.http_url}/api/v1/jobs", timeout=30).json()["jobs"]
    lean = {k: v for k, v in _but_age(shown).items() if k != "results"}
    assert _but_age(next(j for j in listed if j["id"] == done_job.id)) == lean
    cli_listed = json.loads(cli(two, "jobs", "-o", "json").stdout)["jobs"]
    assert _but_age(next(j for j in cli_listed if j["id"] == done_job.id)) == lean
    # The web UI's view: the whole message, times in unix seconds.
    full = httpx.get(f"{two.http_url}/api/v1/jobs/{done_job.id}", params={"view": "full"}, timeout=30).json()
    assert isinstance(full["created_at"], float) and {"p2p", "train", "sdc_check"} <= set(full)
    assert full["results"] == rest["results"]


def test_auto_iters_read_auto_on_both_interfaces(two):
    body = {"world_size": 2, "queue": True, "placement": {"host": "elsewhere"}, "collective": {"op": "all_reduce"}}
    job = httpx.post(f"{two.http_url}/api/v1/jobs", json=body, timeout=30).json()
    try:
        assert job["spec"]["collective"]["iters"] == "auto"
        assert "iters: auto" in cli(two, "job", job["id"], "-o", "yaml").stdout
    finally:
        two.client.cancel(job["id"])


def test_a_broadcast_csv_has_no_reduce_op_and_fleet_health_names_every_count(two):
    job = two.wait_job(two.submit(op="broadcast", sizes=[1024], iters=2, warmup=1).id)
    assert job.state == pb.SUCCEEDED, job.reason
    csv_text = httpx.get(f"{two.http_url}/api/v1/jobs/{job.id}/results", params={"format": "csv"}, timeout=30).text
    header, row = csv_text.splitlines()
    assert dict(zip(header.split(","), row.split(",")))["reduce_op"] == ""
    counts = httpx.get(f"{two.http_url}/api/v1/fleet/health", timeout=30).json()["counts"]
    assert "VERDICT_UNSPECIFIED" not in counts
    # UNCHECKED counts the workers with no verdict yet, as the worker listing shows them.
    assert counts["UNCHECKED"] == sum(1 for w in two.client.workers() if not w.health.verdict) > 0


def test_the_openapi_document_is_built_at_start(two):
    """Built with the app (dashboard/app.py): the first request is served like any other, and
    documents the lean job and the `queue` field."""
    first = httpx.get(f"{two.http_url}/openapi.json", timeout=30)
    doc = first.json()
    assert "LeanJob" in doc["components"]["schemas"] and "queue" in doc["components"]["schemas"]["JobSpecIn"]["properties"]
    assert httpx.get(f"{two.http_url}/openapi.json", timeout=30).json() == doc


# ---- a newcomer's traps end in one line that says what to do ----------------------------------


def _one_line_refusal(argv: list[str], env: dict | None = None, timeout: float = 60) -> tuple[int, list[str]]:
    """Run a command that should refuse at once: (exit code, its stderr's lines). One that is
    still running after `timeout` (a second coordinator sharing the port) fails the test."""
    p = subprocess.Popen(ringleader_cmd(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"still running after {timeout} s: {err[-2000:]}")
    assert out == ""
    return p.returncode, err.splitlines()


def test_a_second_coordinator_on_a_taken_grpc_port_refuses_in_one_line(two, tmp_path):
    code, lines = _one_line_refusal(["coordinator", "--grpc-address", two.address, "--http-address", "",
                                     "--db", str(tmp_path / "second.db")])
    assert code == 2 and lines == [
        f"ringleader: error: --grpc-address: {two.address} is already in use (another coordinator running?): "
        "stop that one, or give --grpc-address a free port (:0 picks one)"]
    assert cli(two, "workers", "-o", "json").returncode == 0  # the first one still answers


def test_a_second_coordinator_on_a_taken_http_port_refuses_in_one_line(two, tmp_path):
    http_address = two.http_url.split("//")[1]
    code, lines = _one_line_refusal(["coordinator", "--grpc-address", "127.0.0.1:0", "--http-address", http_address,
                                     "--db", str(tmp_path / "second.db")])
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"ringleader: error: --http-address: {http_address} is already in use")
    assert httpx.get(f"{two.http_url}/healthz", timeout=30).text == "ok"


def _without(tmp: Path, module: str) -> dict:
    """An environment whose Python processes cannot import `module` (nor its submodules), as on
    a plain `pip install ringleader`: a sitecustomize that refuses it, on PYTHONPATH."""
    site = tmp / f"without-{module}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r} or name.startswith({module + '.'!r}):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Refuse())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGLEADER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    return env


def test_a_worker_without_torch_exits_at_once_naming_the_extra(two, tmp_path):
    code, lines = _one_line_refusal(["--coordinator", two.address, "worker", "--device", "cpu", "--worker-id", "nt0"],
                                    env=_without(tmp_path, "torch"))
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("ringleader: error: the worker needs torch") and "pip install 'ringleader[worker]'" in lines[0]


def test_a_worker_whose_executor_cannot_start_stops_at_sigterm_without_claiming_it_is_ready(two, tmp_path):
    """Its executors fail to import torch.distributed, so each start fails and the daemon waits
    out a growing backoff; a SIGTERM ends that wait, and nothing says "executor ready"."""
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        p = subprocess.Popen(ringleader_cmd("--coordinator", two.address, "worker", "--device", "cpu", "--worker-id", "bt0"),
                             stdout=out, stderr=subprocess.STDOUT, env=_without(tmp_path, "torch.distributed"))
    try:
        deadline = time.monotonic() + 120
        while log.read_text().count("failed to start") < 3:  # the next wait is up to 4 s, growing
            assert p.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.wait()
    said = log.read_text()
    assert "executor ready" not in said and "registering" not in said, said[-3000:]
