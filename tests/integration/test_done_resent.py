"""A daemon's last JobDone survives a coordinator that took it and died (worker/link.py).

A write that succeeds says nothing of its arrival: the coordinator may die with the Done in a
socket buffer, or after handling it and before its paced commit. Then the restarted coordinator
still has the job RUNNING and, had the daemon forgotten the Done, would run it again after its
re-attach grace (this lost a Done in CI: tests/integration/test_ended_while_away.py). Here a real
gRPC server on loopback plays a coordinator that ends the stream after the first message it takes;
the link is the daemon's own."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc
from worker.link import CoordinatorLink

pytestmark = pytest.mark.integration


class Coordinator(workers_pb2_grpc.WorkerServiceServicer):
    """Each stream: take the Register, answer it, and hand the stream to the test, which reads
    what it wants and then ends it (the coordinator "dies" with what it read)."""

    def __init__(self) -> None:
        self.sessions: asyncio.Queue = asyncio.Queue()

    async def Connect(self, request_iterator, context):
        reg = (await context.read()).register
        await context.write(wpb.CoordinatorMessage(registered=wpb.Registered(
            worker_id=reg.worker_id, heartbeat_interval_s=60.0)))
        ended = asyncio.Event()
        await self.sessions.put((reg, context, ended))
        await ended.wait()


async def taken(context) -> wpb.WorkerMessage:
    """The next message up the stream that is not a heartbeat."""
    while (msg := await asyncio.wait_for(context.read(), 20)).WhichOneof("msg") == "heartbeat":
        pass
    return msg


def done(job_id: str, rank: int, holds: str = "") -> wpb.WorkerMessage:
    return wpb.WorkerMessage(done=wpb.JobDone(job_id=job_id, rank=rank, ok=True, warm_group=holds))


def test_the_last_done_is_sent_again_on_each_new_stream_until_the_next_assignment():
    asyncio.run(scenario())


async def scenario() -> None:
    coordinator = Coordinator()
    server = grpc.aio.server()
    workers_pb2_grpc.add_WorkerServiceServicer_to_server(coordinator, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    holds = ["g1"]  # the group the executor holds

    def register() -> wpb.Register:  # as worker/daemon.py builds it: the job of a Done not yet sent
        job_id, rank = link.unreported_done() or ("", 0)
        return wpb.Register(worker_id="w0", running_job_id=job_id, running_rank=rank, warm_group=holds[0])

    async def nothing(msg: wpb.CoordinatorMessage) -> None:
        pass

    link = CoordinatorLink(f"127.0.0.1:{port}", "w0", register, wpb.Heartbeat, nothing, max_backoff_s=0.2)
    stop = asyncio.Event()
    running = asyncio.create_task(link.run(stop))

    async def session() -> tuple[wpb.Register, object, asyncio.Event]:
        return await asyncio.wait_for(coordinator.sessions.get(), 20)

    dropped = wpb.WorkerMessage(group_dropped=wpb.GroupDropped(group_key="g"))
    try:
        reg, stream, end = await session()
        assert reg.running_job_id == ""
        link.send(done("j1", 1, holds="g1"), kept=True)
        assert await taken(stream) == done("j1", 1, holds="g1")
        holds[0] = ""  # its group dropped since: the Done sent again says so, as the Register does
        end.set()  # taken, and the coordinator dies before its commit

        reg, stream, end = await session()  # the next one hears of it by the Register, and first
        assert (reg.running_job_id, reg.running_rank, reg.warm_group) == ("j1", 1, "")
        assert await taken(stream) == done("j1", 1)
        assert link.kept_done("j1") and not link.kept_done("j2")
        end.set()

        reg, stream, end = await session()  # again: no stream is known to have outlived it
        assert reg.running_job_id == "j1" and await taken(stream) == done("j1", 1)
        link.forget_done()  # placed again (worker/daemon.py _assign): the coordinator took it
        assert not link.kept_done("j1")
        link.send(dropped)
        assert await taken(stream) == dropped
        end.set()

        reg, stream, end = await session()
        assert reg.running_job_id == ""
        link.send(done("j2", 0))  # a reply ("not running it"): sent once, never kept
        assert await taken(stream) == done("j2", 0)
        end.set()

        reg, stream, end = await session()
        assert reg.running_job_id == ""
        link.send(dropped)
        assert await taken(stream) == dropped
        end.set()
    finally:
        stop.set()
        link.stop()
        await asyncio.gather(running, return_exceptions=True)
        await server.stop(None)
