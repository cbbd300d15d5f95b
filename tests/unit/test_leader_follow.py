"""Following the leader among several coordinator addresses (ringleader/leader.py), against real
gRPC servers on loopback: a standby's refusal (coordinator/edge/standby.py) and a serving one."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from coordinator.edge.standby import start_standby_server
from ringleader.leader import Rotation, addresses, named_leader, pick_leader
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc


def test_addresses_and_rotation_jump_to_the_named_leader_or_go_round():
    assert addresses("a:1") == ["a:1"] and addresses(" a:1, b:2 ,") == ["a:1", "b:2"]
    r = Rotation("a:1,b:2,c:3")
    assert r.current == "a:1"
    assert r.failed("standby, leader is c:3") == "c:3"  # a standby named one of ours
    assert r.failed("connection refused") == "a:1"  # anything else: the next, round
    assert r.failed("standby, leader is elsewhere:9") == "b:2"  # not ours: the next
    assert named_leader("standby, leader is x:1") == "x:1" and named_leader("deadline exceeded") == ""


def test_a_standby_refuses_naming_the_leader_and_the_client_picks_the_serving_one():
    async def scenario():
        standby, sport = await start_standby_server("127.0.0.1:0", lambda: "leader.example:50051")
        leader = grpc.aio.server()
        h = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(h, leader)
        lport = leader.add_insecure_port("127.0.0.1:0")
        await leader.start()
        await h.set("", health_pb2.HealthCheckResponse.SERVING)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{sport}") as ch:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await jobs_pb2_grpc.JobServiceStub(ch).GetJob(pb.GetJobRequest(job_id="x"), timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
                assert info.value.details() == "standby, leader is leader.example:50051"
                check = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                assert (await check).status == health_pb2.HealthCheckResponse.NOT_SERVING
            target = f"127.0.0.1:{sport},127.0.0.1:{lport}"
            picked = await asyncio.to_thread(pick_leader, target, grpc.insecure_channel)
            assert picked == f"127.0.0.1:{lport}"
        finally:
            await standby.stop(0)
            await leader.stop(0)

    asyncio.run(scenario())
