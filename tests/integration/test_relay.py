"""The worker relay (coordinator --worker-address, coordinator/edge/relay.py): real daemons reach
the coordinator through it, run jobs, lose it to a kill -9 and come back through its successor;
refusals made on either side of it reach the daemon as they would on the coordinator's port."""

import os
import signal
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from cluster import Cluster

from bench.loadstats import children

from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc

pytestmark = pytest.mark.integration


def _relay_pid(c: Cluster) -> int:
    # Started from the edge loop's thread: listed in that thread's children, so by parent pid here.
    for pid in children(c.coordinator.pid):
        try:
            if b"coordinator.edge.relay" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            pass
    raise AssertionError("no relay process under the coordinator")


def _wait_for(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return got


def test_daemons_run_jobs_through_the_relay_and_survive_its_kill(fresh_cluster):
    c = fresh_cluster
    c.start_coordinator(relay=True, http=True)
    assert c.worker_address and c.worker_address != c.address
    for wid in ("r0", "r1"):
        c.start_worker(wid, extra=["--state-dir", str(c.tmp / "state")])
    c.wait_idle(["r0", "r1"])
    job = c.wait_job(c.submit(world_size=2, workers=["r0", "r1"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason

    first = _relay_pid(c)
    os.kill(first, signal.SIGKILL)
    log = c.tmp / "coordinator.log"
    _wait_for("the coordinator did not name the relay's end",
              lambda: "worker r0 left: stream broken (the worker relay exited)" in log.read_text())
    # A new relay on the same port; the daemons reconnect to it under their ids (their secrets kept).
    second = _wait_for("no new relay", lambda: next((p for p in [_try_relay_pid(c)] if p and p != first), None))
    c.wait_idle(["r0", "r1"], timeout=60)
    job = c.wait_job(c.submit(world_size=2, workers=["r0", "r1"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason
    assert _relay_pid(c) == second
    metrics = urllib.request.urlopen(f"{c.http_url}/metrics", timeout=10).read().decode()
    for line in ("ringleader_worker_relay_up 1.0", "ringleader_worker_relay_streams 2.0",
                 "ringleader_worker_relay_restarts_total 1.0"):
        assert line in metrics.splitlines(), [m for m in metrics.splitlines() if "relay" in m]

    # The coordinator's end takes its relay with it.
    c.stop_coordinator()
    _wait_for("the relay outlived its coordinator", lambda: not os.path.exists(f"/proc/{second}"), timeout=30)


def _try_relay_pid(c: Cluster) -> int | None:
    try:
        return _relay_pid(c)
    except AssertionError:
        return None


def test_refusals_cross_the_relay(fresh_cluster, tmp_path):
    """The relay's own check (the workers' token, before anything crosses) and the coordinator's
    (an id bound to another daemon's secret, decided on the core) both reach the caller as statuses."""
    token = "w" * 32
    (tmp_path / "workers.token").write_text(token)
    c = fresh_cluster
    c.start_coordinator(relay=True, extra=["--worker-token-file", str(tmp_path / "workers.token")])
    c.worker_flags = ["--worker-token-file", str(tmp_path / "workers.token")]
    c.start_worker("bound")
    c.wait_idle(["bound"])
    _wait_for("no credential bound", lambda: "worker bound stored its credential" in (c.tmp / "coordinator.log").read_text())

    def connect(metadata, register: wpb.Register | None):
        with grpc.insecure_channel(c.worker_address) as channel:
            call = workers_pb2_grpc.WorkerServiceStub(channel).Connect(
                iter([wpb.WorkerMessage(register=register)] if register else [wpb.WorkerMessage(heartbeat=wpb.Heartbeat())]),
                metadata=metadata, timeout=30)
            with pytest.raises(grpc.RpcError) as err:
                list(call)
            return err.value

    reg = wpb.Register(worker_id="bound", host="h", address="127.0.0.1", backend="gloo",
                       device=pb.Device(type="cpu", index=0, name="impostor"))
    refused = connect((("authorization", "Bearer " + "x" * 32),), reg)
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, refused.details()
    assert "invalid token" in refused.details()
    refused = connect((("authorization", f"Bearer {token}"),), reg)
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED, refused.details()
    assert "register: worker id bound is bound to another daemon's credential" in refused.details()
    refused = connect((("authorization", f"Bearer {token}"),), None)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.details()
    assert "the first message must be Register" in refused.details()
    # The worker that holds the id is untouched.
    assert {w.worker_id: w.state for w in c.client.workers()}["bound"] == pb.IDLE


def test_a_taken_relay_port_or_the_api_port_is_refused_naming_the_flag(tmp_path):
    import socket
    import subprocess

    from cluster import ringleader_cmd

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for worker_address, grpc_address, said in (
                (f"127.0.0.1:{port}", "127.0.0.1:0", f"--worker-address: cannot listen on 127.0.0.1:{port}"),
                ("127.0.0.1:50999", "127.0.0.1:50999", "--worker-address: 127.0.0.1:50999 is already the "
                                                       "coordinator's gRPC address")):
            p = subprocess.run(ringleader_cmd("coordinator", "--grpc-address", grpc_address, "--worker-address",
                                              worker_address, "--http-address", "", "--db", str(tmp_path / "j.db")),
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 2 and f"ringleader: error: {said}" in p.stderr, p.stderr[-2000:]
            assert "Traceback" not in p.stderr


def test_a_coordinator_killed_outright_takes_its_relay_and_its_socket_with_it(fresh_cluster):
    c = fresh_cluster
    c.start_coordinator(relay=True)
    relay = _relay_pid(c)
    argv = Path(f"/proc/{relay}/cmdline").read_bytes().split(b"\0")
    sock = Path(argv[argv.index(b"--link") + 1].decode())
    assert sock.exists()
    c.coordinator.kill()
    c.coordinator.wait(30)
    _wait_for("the relay outlived its killed coordinator", lambda: not Path(f"/proc/{relay}").exists(), timeout=30)
    _wait_for("the link's socket was left behind", lambda: not sock.parent.exists(), timeout=10)


def test_a_fleet_past_relay_at_moves_to_a_relay_the_coordinator_starts_itself(fresh_cluster):
    """--relay-at 2 (512 by default): the first two daemons stay on the gRPC port, the coordinator
    then starts a relay of its own and the third registers through it, having dialled only the
    address it was given; one job runs across both; a kill of that relay brings its daemon back."""
    c = fresh_cluster
    c.start_coordinator(extra=["--relay-at", "2"])
    for wid in ("a0", "a1"):
        c.start_worker(wid)
    c.wait_idle(["a0", "a1"])
    with pytest.raises(AssertionError):
        _relay_pid(c)  # a small fleet starts none
    c.start_worker("a2")
    c.wait_idle(["a0", "a1", "a2"], timeout=60)
    relay = _relay_pid(c)
    _wait_for("a2 was not moved", lambda: "moves this stream to its worker relay" in _text(c, "a2"))
    assert "moves this stream" not in _text(c, "a0") + _text(c, "a1")
    job = c.wait_job(c.submit(world_size=3, workers=["a0", "a1", "a2"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason
    # A daemon that could not reach the relay (its port behind a Service, say) says so, and is
    # served on the port it dialled; without saying so, it is moved.
    assert _first_answer(c, relay_unreachable=False).registered.move_to_port > 0
    served = _first_answer(c, relay_unreachable=True).registered
    assert served.move_to_port == 0 and served.worker_id == "raw", served

    os.kill(relay, signal.SIGKILL)
    log = c.tmp / "coordinator.log"
    _wait_for("the coordinator did not name the relay's end",
              lambda: "worker a2 left: stream broken (the worker relay exited)" in log.read_text())
    c.wait_idle(["a0", "a1", "a2"], timeout=60)  # through the relay started again, or directly meanwhile
    job = c.wait_job(c.submit(world_size=3, workers=["a0", "a1", "a2"], op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason


def _text(c: Cluster, wid: str) -> str:
    return (c.tmp / f"{wid}.log").read_text(errors="replace")


def _first_answer(c: Cluster, relay_unreachable: bool) -> wpb.CoordinatorMessage:
    reg = wpb.Register(worker_id="raw", host="raw-host", address="127.0.0.1", backend="gloo",
                       device=pb.Device(type="cpu", index=0, name="cpu"), relay_unreachable=relay_unreachable)
    answered = threading.Event()

    def requests():  # the stream stays open until the answer came (a closed one ends the worker's stream)
        yield wpb.WorkerMessage(register=reg)
        answered.wait(30)

    with grpc.insecure_channel(c.address) as channel:
        call = workers_pb2_grpc.WorkerServiceStub(channel).Connect(requests(), timeout=30)
        first = next(call)
        answered.set()
        call.cancel()
        return first


def test_unchanged_heartbeats_cross_batched_and_a_silent_worker_is_still_named_in_time(fresh_cluster):
    """An idle daemon's heartbeat is the same bytes each second: the relay sends those on as one
    ALIVE frame a quarter second (counted in its metrics) and the worker stays connected well past
    its heartbeat timeout; a daemon stopped with SIGSTOP sends nothing, and is declared lost in its
    normal time."""
    c = fresh_cluster
    c.start_coordinator(relay=True, http=True, extra=["--heartbeat-timeout", "2"])
    for wid in ("b0", "b1"):
        c.start_worker(wid)
    c.wait_idle(["b0", "b1"])
    time.sleep(6)  # three heartbeat timeouts, idle
    assert {w.worker_id: w.state for w in c.client.workers()} == {"b0": pb.IDLE, "b1": pb.IDLE}
    log = c.tmp / "coordinator.log"
    assert "left:" not in log.read_text()
    metrics = urllib.request.urlopen(f"{c.http_url}/metrics", timeout=10).read().decode()
    batched = next(float(m.split()[-1]) for m in metrics.splitlines()
                   if m.startswith("ringleader_worker_relay_alive_heartbeats_total"))
    assert batched >= 8, batched  # about 2 workers x 6 s, less the first of each

    os.kill(c.workers["b1"].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        _wait_for("b1 was not declared lost", lambda: "worker b1 left: no heartbeat" in log.read_text(), timeout=15)
        assert time.monotonic() - t0 < 2 + 3  # its timeout, a batch and a tick
        assert next(w.state for w in c.client.workers() if w.worker_id == "b0") == pb.IDLE
    finally:
        os.kill(c.workers["b1"].pid, signal.SIGCONT)


def test_past_relay_share_another_relay_starts_and_new_workers_spread(fresh_cluster):
    """--relay-at 1 --relay-share 1: the first daemon stays direct, the next ones move to relays,
    a second relay starts once the first carries one stream, and the daemons land on both."""
    c = fresh_cluster
    c.start_coordinator(extra=["--relay-at", "1", "--relay-share", "1"])
    ids = ["s0", "s1", "s2", "s3", "s4"]
    for wid in ids:
        c.start_worker(wid)
        c.wait_idle([wid], timeout=60)
    relays = [p for p in children(c.coordinator.pid) if b"coordinator.edge.relay" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(relays) >= 2, relays
    ports = {line.rsplit(", ", 1)[-1] for wid in ids for line in _text(c, wid).splitlines()
             if "moves this stream to its worker relay" in line}
    assert len(ports) >= 2, ports
    job = c.wait_job(c.submit(world_size=5, workers=ids, op="all_reduce").id)
    assert job.state == pb.SUCCEEDED, job.reason
