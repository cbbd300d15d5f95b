"""The database fails over under a leading coordinator: a PostgreSQL primary with a synchronous
streaming replica (as a CloudNativePG cluster with `minSyncReplicas: 1` runs), two coordinators
on a connection string naming both servers (`target_session_attrs=read-write`), a burst of
submits, each retried with its request id until acknowledged; the primary is killed mid-burst and
the replica promoted.

The leader's commit fails with the primary: its memory now holds jobs the database never got, so
it steps down (exit 3, "a commit failed") rather than answer a retried request id from that
memory, and the standby leads from what the new primary holds. Every acknowledged submit is
stored exactly once, under the job id it was acked with. Before the step-down, a retried submit
was answered with the job id of a row that was never written (one in 3,000 lost)."""

import os
import time

import pytest

from bench.failover import Burst, check_store, start_coordinator, stop

pytestmark = pytest.mark.integration

LEAD_WITHIN_S = 15.0


@pytest.fixture()
def servers():
    from pgserver import PostgresServer, Unavailable

    started = []
    try:
        primary = PostgresServer()
        started.append(primary)
        primary.start()
        replica = primary.replica()
        started.append(replica)
    except Unavailable as exc:
        for s in started:
            s.stop()
        if os.environ.get("RINGLEADER_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required (RINGLEADER_REQUIRE_POSTGRES=1) but cannot start: {exc}")
        pytest.skip(f"no PostgreSQL (with pg_basebackup): {exc}")
    yield primary, replica
    for s in started:
        s.stop()


def test_a_database_failover_loses_no_acknowledged_job(servers, tmp_path):
    primary, replica = servers
    dsn = (f"postgresql://{primary.user}@/postgres?host={primary.sockets},{replica.sockets}"
           "&target_session_attrs=read-write")
    a = start_coordinator("a", dsn, tmp_path, ttl=2.0)
    coordinators = [a]
    try:
        a.wait_line("ringleader coordinator: gRPC", 60)
        b = start_coordinator("b", dsn, tmp_path, ttl=2.0)
        coordinators.append(b)
        b.wait_line("ringleader coordinator: standby", 60)
        burst = Burst(f"{a.grpc},{b.grpc}", n=3000, deadline_s=120).start()
        deadline = time.monotonic() + 60
        while len(burst.acked) < 300 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(burst.acked) >= 300, "the burst did not start"
        primary.kill()
        killed = time.monotonic()
        replica.promote()
        led = b.wait_line("ringleader coordinator: gRPC", 60)
        assert led - killed <= LEAD_WITHIN_S, led - killed
        burst.join()
        assert len(burst.acked) == 3000, (len(burst.acked), burst.retries)
        assert a.proc.wait(30) == 3  # stepped down: its memory was ahead of the database
        log = (tmp_path / "coordinator-a.log").read_text()
        assert "a commit failed" in log, log[-2000:]
        new_primary = f"postgresql://{primary.user}@/postgres?host={replica.sockets}"
        assert check_store(new_primary, burst.acked) == 3000  # each acked once, under its job id
    finally:
        stop([c.proc for c in coordinators])
