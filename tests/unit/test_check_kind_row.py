"""A fleet health check is one row of the kind table plus its module: this module is the module of
a test-only check (its spec functions, its verdict function, its short settings), and the test
puts its row in the table in place of the real entry of the same proto member (the proto is the
one part a new kind adds elsewhere). Then everything that runs checks finds it by the row: the
sweep's plan, a recheck, a preflight, the control core applying its verdicts as it ends, and the
job header the web UI shows. Also: every kind of the table has a header."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
from fastapi import FastAPI

from coordinator.shell.facade import Coordinator
from coordinator.health import sweeper
from coordinator.store.memory import MemoryJobStore
from dashboard import fleet_api
from ringleader import jobspec, kinds
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from test_facade import Worker

MEMBER = "sdc_check"  # the proto member the test row stands on
HERE = __name__


# ---- the test check's module: its spec functions, verdicts and short settings -----------------

def check_sdc_check(out: pb.JobSpec) -> None:
    out.sdc_check.rounds = out.sdc_check.rounds or 3
    if out.sdc_check.rounds > 9:
        raise InvalidSpec("sdc_check.rounds", "the test check runs at most 9 rounds")


def view_sdc_check(out: pb.JobSpec) -> jobspec.ValidJob:
    return jobspec.valid(out, total=out.sdc_check.rounds)


def short_sdc_check() -> pb.SdcCheckSpec:
    return pb.SdcCheckSpec(rounds=5, seed=42)


def verdicts(result: pb.SdcCheckResult, ranks) -> dict:
    """Failed: any wrong element (this check trusts no checksum majority)."""
    return {w.rank: (pb.UNHEALTHY if w.collective_wrong else pb.HEALTHY, f"{w.collective_wrong} wrong", "0 wrong")
            for w in result.workers}


def assemble(spec: pb.JobSpec, workers, models, evidence: dict) -> pb.SdcCheckResult:
    """Each rank's wrong elements, as it reported them itself."""
    return pb.SdcCheckResult(workers=[pb.SdcFigures(rank=r, collective_wrong=e.reduce_wrong)
                                      for r, e in sorted(evidence.items())])


@pytest.fixture
def test_row(monkeypatch):
    real = kinds.get(MEMBER)
    row = dataclasses.replace(kinds._check(MEMBER, "a test-only check", verdicts="verdicts", module=HERE,
                                           verdicts_module=HERE, assemble_module=HERE),
                              header=f"{HERE}:header", assemble=f"{HERE}:assemble")
    monkeypatch.setattr(kinds, "TABLE", tuple(row if k is real else k for k in kinds.TABLE))
    return row


def header(spec: pb.JobSpec) -> str:
    return f"test check · {spec.sdc_check.rounds} rounds"


def test_a_check_kind_is_one_row_and_one_module(test_row):
    core = Coordinator(MemoryJobStore())
    ws = {f"w{i}": Worker(core, f"w{i}", i) for i in range(3)}
    # A sweep plans it with the row's short settings; the row's spec check fills its defaults.
    (spec,) = sweeper.plan([w for w in core.fleet.all_workers()], [MEMBER])
    assert spec.sdc_check == short_sdc_check()
    with pytest.raises(InvalidSpec, match="sdc_check.rounds"):
        core.submit(pb.JobSpec(world_size=1, sdc_check=pb.SdcCheckSpec(rounds=10)))
    job = core.submit(spec)
    assert kinds.header(core.get(job.id).spec) == "test check · 5 rounds"
    # Its verdicts come from the row's function, applied as the check ends.
    (a0,) = [m for w in ws.values() for k, m in w.inbox() if k == "assignment"]  # rank 0 first
    ws["w0"].send(store_ready=wpb.StoreReady(job_id=a0.job_id, group_key=a0.group_key, store_port=1))
    for rank, wid in reversed(list(enumerate(sorted(ws)))):  # each rank's own evidence, assembled by the row's function
        ws[wid].done(a0.job_id, rank, h49e_sdc=wpb.H49eSdcEvidence(reduce_wrong=7 if wid == "w2" else 0))
    health = core.fleet.book.get("w2")
    assert (health.verdict, health.figure, health.check) == (pb.UNHEALTHY, "7 wrong", MEMBER)
    assert core.fleet.book.get("w0").verdict == pb.HEALTHY and core.fleet.book.quarantined("w2")


def test_every_kind_has_a_header_and_rest_serves_a_jobs_header():
    specs = {
        "collective": pb.JobSpec(collective=pb.CollectiveSpec(op="all_reduce", sizes=[8, 1 << 20], dtype="float32")),
        "p2p": pb.JobSpec(p2p=pb.P2PSpec(mode="latency")),
        "gradient_average": pb.JobSpec(gradient_average=pb.GradientAverageSpec(size_bytes=64 << 20)),
        "train": pb.JobSpec(train=pb.TrainSpec(model="linear", steps=10)),
        "algo_sweep": pb.JobSpec(algo_sweep=pb.AlgoSweepSpec(algos=["ring", "tree"])),
        "link_matrix": pb.JobSpec(link_matrix=pb.LinkMatrixSpec(size_bytes=1 << 20)),
        "gpu_check": pb.JobSpec(gpu_check=pb.GpuCheckSpec(matmul_n=8192, dtype="bfloat16")),
        "sdc_check": pb.JobSpec(sdc_check=pb.SdcCheckSpec(rounds=2)),
    }
    assert set(specs) == set(kinds.names())
    headers = {name: kinds.header(spec) for name, spec in specs.items()}
    assert headers["gpu_check"] == "GPU check · matrix product 8192² bfloat16"
    assert headers["collective"] == "all_reduce · float32 · 8..1M · in-place"
    assert headers["train"] == "training · linear · 10 steps"
    assert headers["p2p"] == "p2p · latency · rank 0 ↔ 1"
    assert headers["gradient_average"] == "gradient averaging · 64MB"
    assert headers["algo_sweep"] == "algo sweep · ring, tree · eager"
    assert headers["link_matrix"] == "link matrix check · 1MB ping-pong"
    assert headers["sdc_check"] == "silent data corruption check · 2 rounds"

    core = Coordinator(MemoryJobStore())
    job = core.submit(pb.JobSpec(world_size=1, gpu_check=pb.GpuCheckSpec(matmul_n=1024, dtype="float32")))
    app = FastAPI()
    app.include_router(fleet_api.router(core))

    async def get(path):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rest") as c:
            return await c.get(path)

    r = asyncio.run(get(f"/api/v1/jobs/{job.id}/header"))
    assert r.status_code == 200 and r.json() == {"job_id": job.id, "kind": "gpu_check",
                                                 "header": "GPU check · matrix product 1024² float32"}
    assert asyncio.run(get("/api/v1/jobs/nope/header")).status_code == 404
