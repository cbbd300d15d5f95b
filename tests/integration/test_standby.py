"""Two coordinator processes on one real PostgreSQL: the standby serves nothing that changes state
and says who leads; a leader cut off from the database (its server processes stopped, as a
partition would) is deposed within the lease time, says so and exits, and the standby leads; the
old leader, started again, stands by."""

import json
import os
import signal
import time
import urllib.error
import urllib.request

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.failover import start_coordinator, stop
from ringleader_app.standby import DEPOSED_EXIT
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

pytestmark = pytest.mark.integration

TTL = 3.0


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def health(address: str) -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def submit_refusal(address: str) -> grpc.RpcError:
    with grpc.insecure_channel(address) as ch, pytest.raises(grpc.RpcError) as info:
        jobs_pb2_grpc.JobServiceStub(ch).SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(world_size=1)), timeout=5)
    return info.value


def backends(dsn: str, names: list[str]) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = ANY(%s)", (names,))]


def test_standby_refuses_then_takes_over_from_a_leader_cut_off_from_the_database(postgres, tmp_path):
    dsn = postgres.new_schema("standby")
    a = start_coordinator("a", dsn, tmp_path, TTL)
    procs = [a.proc]
    try:
        a.wait_line("ringleader coordinator: gRPC", 60)
        b = start_coordinator("b", dsn, tmp_path, TTL)
        procs.append(b.proc)
        b.wait_line("ringleader coordinator: standby", 60)
        # The standby: not serving, refuses state changes naming the leader, not ready.
        assert health(a.grpc) == health_pb2.HealthCheckResponse.SERVING
        assert health(b.grpc) == health_pb2.HealthCheckResponse.NOT_SERVING
        deadline = time.monotonic() + 10  # b reads who leads on its next poll
        while (refusal := submit_refusal(b.grpc)).details() != f"standby, leader is {a.grpc}":
            assert time.monotonic() < deadline, refusal.details()
            time.sleep(0.1)
        assert refusal.code() == grpc.StatusCode.UNAVAILABLE
        assert http_get(f"{b.http}/readyz") == (503, f"standby, leader is {a.grpc}")
        assert http_get(f"{a.http}/readyz")[0] == 200
        assert f'ringleader_leader{{holder="{a.grpc}"}} 1.0' in http_get(f"{a.http}/metrics")[1]
        assert f'ringleader_leader{{holder="{b.grpc}"}} 0.0' in http_get(f"{b.http}/metrics")[1]

        # The partition: every database server process serving a stops.
        stopped = backends(dsn, [f"ringleader-lease {a.grpc}", "ringleader-store"])
        assert len(stopped) == 2, stopped
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        cut = time.monotonic()
        try:
            assert a.proc.wait(3 * TTL) == DEPOSED_EXIT
            deposed_s = time.monotonic() - cut
            led = b.wait_line("ringleader coordinator: gRPC", 30) - cut
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        assert deposed_s <= TTL + 1.0, deposed_s  # the lease time (and a second for a loaded machine)
        assert "deposed" in (tmp_path / "coordinator-a.log").read_text()
        assert health(b.grpc) == health_pb2.HealthCheckResponse.SERVING
        metrics = http_get(f"{b.http}/metrics")[1]
        assert f'ringleader_leader{{holder="{b.grpc}"}} 1.0' in metrics
        assert "ringleader_failovers_total 1.0" in metrics
        print("partition:", json.dumps({"deposed_s": round(deposed_s, 2), "standby_led_s": round(led, 2)}))

        # The old leader, back, stands by behind the new one.
        a2 = start_coordinator("a2", dsn, tmp_path, TTL)
        procs.append(a2.proc)
        a2.wait_line("ringleader coordinator: standby", 60)
        assert health(a2.grpc) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        stop(procs)
