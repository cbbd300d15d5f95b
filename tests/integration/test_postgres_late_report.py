"""A rank's late report about a job the PostgreSQL store has let go of from memory: its log is
stored, and the read from the server happens off the coordinator's loop (coordinator/edge/
worker_stream.py reads it before the report reaches the core). The real coordinator in this
process on a real PostgreSQL (tests/pgserver.py), against protocol-level fake daemons."""

from __future__ import annotations

import asyncio
import threading
import traceback

import pytest
from test_worker_trust import USERS_TOKEN, WORKERS_TOKEN, FakeWorker, until  # noqa: I001 - on the path

from coordinator.store import behind as pg_store
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.security import ServerSecurity
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

pytestmark = pytest.mark.integration


def one_rank(worker: str) -> pb.JobSpec:
    return pb.JobSpec(world_size=1, placement=pb.Placement(worker_ids=[worker]),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024]))


def test_a_late_report_of_a_job_no_longer_in_memory_is_read_off_the_loop(postgres, monkeypatch):
    monkeypatch.setattr(pg_store, "HOT_FINISHED", 1)  # the second finished job pushes the first out
    dsn = postgres.new_schema("late_report")
    loop_thread = threading.current_thread()
    reads_on_loop: list[str] = []

    async def scenario():
        coord = RunningCoordinator(CoordinatorConfig(
            grpc_address="127.0.0.1:0", http_address="", db=dsn, heartbeat_timeout=120,
            security=ServerSecurity(USERS_TOKEN, WORKERS_TOKEN)))
        async with coord:
            record = coord.store._record
            read = record.get

            def watched_get(job_id):
                if threading.current_thread() is loop_thread:
                    reads_on_loop.append("".join(traceback.format_stack(limit=8)))
                return read(job_id)
            monkeypatch.setattr(record, "get", watched_get)

            late, quick = FakeWorker(coord.grpc_target, "late", WORKERS_TOKEN), FakeWorker(
                coord.grpc_target, "quick", WORKERS_TOKEN)
            for w in (late, quick):
                await w.connect()
            pair = coord.core.submit(pb.JobSpec(world_size=2, placement=pb.Placement(worker_ids=["late", "quick"]),
                                                collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024])))
            await late.next("assignment")
            rj = coord.core.book.running[pair.id]  # rank 0's store is up: rank 1 is assigned
            await late.send(store_ready=wpb.StoreReady(job_id=pair.id, group_key=rj.group_key, store_port=1234))
            await quick.next("assignment")
            # Rank 1 fails: the job ends; rank 0 is still at work and reports much later.
            await quick.send(done=wpb.JobDone(job_id=pair.id, rank=1, ok=False, error="boom"))
            await until(lambda: coord.core.get(pair.id).state == pb.FAILED)
            for _ in range(3):  # finished jobs after it, until the store has let it go
                job = coord.core.submit(one_rank("quick"))
                await quick.next("assignment")
                await quick.send(done=wpb.JobDone(job_id=job.id, rank=0, ok=True))
                await until(lambda j=job: coord.core.get(j.id).state in (pb.SUCCEEDED, pb.FAILED))
            await until(lambda: not coord.store.resident(pair.id))

            await late.send(done=wpb.JobDone(job_id=pair.id, rank=0, ok=False, error="aborted",
                                             log="rank 0's last words\n"))
            # (read only once the job is back in memory: the test's own read would be on the loop)
            logs = await until(lambda: coord.store.resident(pair.id) and coord.store.rank_logs(pair.id).get(0))
            assert "rank 0's last words" in logs
            assert coord.core.get(pair.id).state == pb.FAILED and "rank 1 (worker quick)" in coord.core.get(pair.id).reason
            for w in (late, quick):
                await w.close()

    asyncio.run(scenario())
    assert reads_on_loop == [], reads_on_loop[0]
