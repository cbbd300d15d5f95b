"""Each worker proves its own name (issue 18, items 2, 3 and 6): a per-worker secret bound to its
id, advertised addresses the coordinator can vouch for, malformed requests answered as such.

The real coordinator in this process (gRPC on loopback, SQLite in a temp folder, its metrics)
against a protocol-level fake daemon that presents whatever secret and address the test says.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from coordinator.core.liveness import Timings
from ringleader.app.process import CoordinatorConfig, RunningCoordinator
from ringleader.security import ServerSecurity, bearer
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc

pytestmark = pytest.mark.integration

USERS_TOKEN, WORKERS_TOKEN = "users-token-0123456789", "workers-token-0123456789"


async def register(target: str, worker_id: str, secret: str = "", address: str = "127.0.0.1",
                   token: str = WORKERS_TOKEN) -> tuple[grpc.aio.Channel, wpb.Registered]:
    """Fake (protocol level): a daemon's registration; returns its open channel and the answer."""
    channel = grpc.aio.insecure_channel(target)
    call = workers_pb2_grpc.WorkerServiceStub(channel).Connect(metadata=bearer(token))
    await call.write(wpb.WorkerMessage(register=wpb.Register(
        worker_id=worker_id, host="fakehost", address=address, backend="gloo", version="fake",
        device=pb.Device(type="cpu", index=0, name="fake"), worker_secret=secret)))
    try:
        first = await call.read()
    except BaseException:
        await channel.close()
        raise
    return channel, first.registered


async def refused(target: str, worker_id: str, **kw) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        channel, _ = await register(target, worker_id, **kw)
        await channel.close()
    return err.value


def coordinator(tmp_path, forget: tuple[str, ...] = ()) -> RunningCoordinator:
    return RunningCoordinator(CoordinatorConfig(
        grpc_address="127.0.0.1:0", http_address="", db=str(tmp_path / "jobs.db"),
        timings=Timings(heartbeat_timeout_s=120),
        security=ServerSecurity(USERS_TOKEN, WORKERS_TOKEN, forget_workers=forget)))


def refusals(coord: RunningCoordinator) -> float:
    text = coord.metrics.render()[0].decode()
    for line in text.splitlines():
        if line.startswith("ringleader_grpc_server_handled_total{") and 'grpc_method="Connect"' in line \
                and 'grpc_code="PERMISSION_DENIED"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def until_disconnected(coord: RunningCoordinator, worker_id: str) -> None:
    for _ in range(500):
        if {w.worker_id: w.state for w in coord.core.list_workers().workers}.get(worker_id) == pb.DISCONNECTED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{worker_id} never disconnected")


def test_an_id_is_bound_to_the_secret_issued_at_its_first_registration(tmp_path):
    async def scenario():
        async with coordinator(tmp_path) as coord:
            target = coord.grpc_target
            channel, answer = await register(target, "w0")
            secret = answer.worker_secret
            assert len(secret) >= 32
            # Connected or not, the id is the secret holder's: the workers' token alone is refused.
            err = await refused(target, "w0")
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "worker id w0 is bound to another daemon's credential" in err.details()
            assert "--forget-worker w0" in err.details()
            await channel.close()
            await until_disconnected(coord, "w0")
            for wrong in ("", "x" * 43, secret[:-1]):
                err = await refused(target, "w0", secret=wrong)
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, wrong
            assert refusals(coord) == 4
            channel, again = await register(target, "w0", secret=secret)
            assert again.worker_secret == ""  # nothing new to keep
            await channel.close()
        assert secret.encode() not in (tmp_path / "jobs.db").read_bytes()  # only its digest is stored

        async with coordinator(tmp_path) as coord:  # a restart: the binding is in the store
            err = await refused(coord.grpc_target, "w0")
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            channel, _ = await register(coord.grpc_target, "w0", secret=secret)
            await channel.close()

        async with coordinator(tmp_path, forget=("w0",)) as coord:  # an operator's reset
            channel, fresh = await register(coord.grpc_target, "w0")
            assert fresh.worker_secret not in ("", secret)
            await channel.close()

    asyncio.run(scenario())


def test_an_advertised_address_must_be_where_the_connection_comes_from(tmp_path):
    async def scenario():
        async with coordinator(tmp_path) as coord:
            err = await refused(coord.grpc_target, "far", address="10.1.2.3")
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            assert err.details() == (
                "register.address: worker far advertises '10.1.2.3', but its connection comes from this host "
                "(loopback): advertise a loopback address (--advertise-host), or connect from the address "
                "peers reach it on")
            assert coord.core.list_workers().workers == []
            for ok in ("127.0.0.1", "localhost", "127.0.1.1"):  # loopback is loopback
                channel, _ = await register(coord.grpc_target, f"near-{ok}", address=ok)
                await channel.close()

    asyncio.run(scenario())


def test_malformed_request_bytes_answer_invalid_argument_without_a_traceback(tmp_path, caplog):
    async def scenario():
        async with coordinator(tmp_path) as coord:
            async with grpc.aio.insecure_channel(coord.grpc_target) as channel:
                raw = channel.unary_unary("/ringleader.v1.JobService/SubmitJob")  # bytes in, bytes out
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await raw(b"\xff\xff\xff\xff", metadata=bearer(USERS_TOKEN), timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.value.details() == "request: the bytes are not a SubmitJob's request (DecodeError)"
                good = pb.SubmitJobRequest(spec=pb.JobSpec(world_size=1, placement=pb.Placement(host="nowhere"),
                                                           collective=pb.CollectiveSpec(op="all_reduce")))
                job = pb.Job.FromString(await raw(good.SerializeToString(), metadata=bearer(USERS_TOKEN), timeout=10))
                assert job.state == pb.QUEUED  # the same path, well-formed, as before

    asyncio.run(scenario())
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
