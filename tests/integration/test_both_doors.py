"""Each write use case (coordinator/edge/usecases.py) through both doors of one real coordinator
process (gRPC JobService and REST /api/v1, two real CPU workers): the same outcome for the same
request, and the same error for the same bad input, the field named at both."""

from __future__ import annotations

import grpc
import httpx
import pytest

from cluster import running
from ringleader import jobspec
from ringleader.errors import CATALOG
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

pytestmark = pytest.mark.integration

NOWHERE = "nowhere.invalid"  # a placement host no worker has: such jobs stay QUEUED
LONG_ID = "w" * (jobspec.MAX_TEXT + 1)  # longer than any worker id may be
ENTRY = {"gpu_model": "NVIDIA H200", "op": "all_reduce", "dtype": "bfloat16", "size_bucket": 1 << 30,
         "ranks": 8, "hosts": 1, "link": "local", "samples": [460.0, 455.0, 462.0]}
# The gRPC codes a REST status stands for, by the one catalog (409 is two of them).
CODES = {}
for _answer in CATALOG.values():
    CODES.setdefault(_answer.http_status, set()).add(_answer.grpc_code)


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    with running(tmp_path_factory.mktemp("doors"), ["d0", "d1"], http=True) as c:
        yield c


@pytest.fixture(scope="module")
def api(cl):
    with httpx.Client(base_url=cl.http_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def stub(cl):
    with grpc.insecure_channel(cl.address) as channel:
        yield jobs_pb2_grpc.JobServiceStub(channel)


def grpc_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=120)
    return caught.value


def same_invalid_field(rest: httpx.Response, rpc: grpc.RpcError, field: str) -> None:
    """Both doors refused the input as invalid, naming `field` (REST in the 422's loc, gRPC as
    the start of its details)."""
    assert rest.status_code == 422, rest.text
    loc = ".".join(str(p) for p in rest.json()["detail"][0]["loc"][1:])
    assert loc == field, rest.text
    assert rpc.code() == grpc.StatusCode.INVALID_ARGUMENT and rpc.details().startswith(f"{field}:"), rpc.details()


def same_error(rest: httpx.Response, rpc: grpc.RpcError) -> None:
    """The same domain error at both doors: statuses of one catalog entry, the same message."""
    assert rpc.code().name in CODES[rest.status_code], (rest.status_code, rpc.code(), rest.text)
    assert rest.json()["detail"] == rpc.details()


def test_submit_and_submit_and_watch_are_one_use_case(api, stub):
    spec = pb.JobSpec(world_size=2, placement=pb.Placement(host=NOWHERE),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
    updates = stub.SubmitAndWatchJob(pb.SubmitJobRequest(spec=spec, request_id="doors-1"), timeout=60)
    accepted = next(updates).accepted
    updates.cancel()
    assert accepted.state == pb.QUEUED
    # The same request id through SubmitJob and REST: the job the streaming call created.
    again = stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id="doors-1"), timeout=60)
    rest = api.post("/api/v1/jobs", params={"request_id": "doors-1"},
                    json={"world_size": 2, "placement": {"host": NOWHERE}, "queue": True,
                          "collective": {"op": "all_reduce", "sizes": [1024], "iters": 1}})
    assert rest.status_code == 201 and rest.json()["id"] == again.id == accepted.id, rest.text
    # Cancelled by one door, a second cancel by either is the same refusal.
    assert stub.CancelJob(pb.CancelJobRequest(job_id=accepted.id), timeout=60).state == pb.CANCELLED
    same_error(api.post(f"/api/v1/jobs/{accepted.id}/cancel"),
               grpc_error(stub.CancelJob, pb.CancelJobRequest(job_id=accepted.id)))
    # The same bad spec, the same field, at the three entrances.
    bad = pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1, dtype="nope"))
    rest = api.post("/api/v1/jobs", json={"world_size": 2, "queue": True,
                                          "collective": {"op": "all_reduce", "sizes": [1024], "iters": 1,
                                                         "dtype": "nope"}})
    same_invalid_field(rest, grpc_error(stub.SubmitJob, pb.SubmitJobRequest(spec=bad)), "collective.dtype")
    streamed = grpc_error(lambda r, timeout: next(stub.SubmitAndWatchJob(r, timeout=timeout)),
                          pb.SubmitJobRequest(spec=bad))
    same_invalid_field(rest, streamed, "collective.dtype")


def test_run_check(api, stub):
    request = {"worker_ids": ["d0", "d1"], "kinds": ["gpu_check"], "wait": True, "timeout_s": 120,
               "gpu_check": {"matmul_n": 64, "copy_bytes": 1 << 16, "iters": 1}}
    rest = api.post("/api/v1/checks", json=request)
    assert rest.status_code == 200, rest.text
    rpc = stub.RunCheck(pb.RunCheckRequest(worker_ids=["d0", "d1"], kinds=["gpu_check"], wait=True, timeout_s=120,
                                           gpu_check=pb.GpuCheckSpec(matmul_n=64, copy_bytes=1 << 16, iters=1)),
                        timeout=180)
    for answer in (rest.json(), {"jobs": [{"state": pb.JobState.Name(j.state)} for j in rpc.jobs],
                                 "verdicts": [{"worker_id": v.worker_id, "check": v.check} for v in rpc.verdicts]}):
        assert [j["state"] for j in answer["jobs"]] == ["SUCCEEDED"], answer
        assert sorted((v["worker_id"], v["check"]) for v in answer["verdicts"]) == [("d0", "gpu_check"),
                                                                                  ("d1", "gpu_check")]
    # A worker id no worker can have is an invalid field at both (gRPC said NOT_FOUND before).
    same_invalid_field(api.post("/api/v1/checks", json={"worker_ids": [LONG_ID]}),
                       grpc_error(stub.RunCheck, pb.RunCheckRequest(worker_ids=[LONG_ID])), "worker_ids.0")


def test_cordon_and_uncordon(api, stub):
    rest = api.post("/api/v1/workers/d0/cordon")
    assert rest.status_code == 200 and rest.json()["health"]["cordoned"] is True, rest.text
    rpc = stub.UncordonWorker(pb.CordonRequest(worker_id="d0"), timeout=60)
    assert not rpc.health.cordoned
    assert stub.CordonWorker(pb.CordonRequest(worker_id="d1"), timeout=60).health.cordoned
    rest = api.post("/api/v1/workers/d1/uncordon")
    assert rest.status_code == 200 and not rest.json()["health"].get("cordoned"), rest.text
    same_error(api.post("/api/v1/workers/nobody/cordon"),
               grpc_error(stub.CordonWorker, pb.CordonRequest(worker_id="nobody")))
    for action, call, request in (("cordon", stub.CordonWorker, pb.CordonRequest),
                                  ("uncordon", stub.UncordonWorker, pb.CordonRequest)):
        rest = api.post(f"/api/v1/workers/{LONG_ID}/{action}")
        assert rest.status_code == 422 and rest.json()["detail"][0]["loc"] == ["path", "worker_id"], rest.text
        rpc = grpc_error(call, request(worker_id=LONG_ID))
        assert rpc.code() == grpc.StatusCode.INVALID_ARGUMENT and rpc.details().startswith("worker_id:"), rpc.details()


def test_approve_return_and_approve_reclaim(api, stub):
    same_error(api.post("/api/v1/workers/d0/approve-return"),
               grpc_error(stub.ApproveWorkerReturn, pb.ValidateApproveReturnRequest(worker_id="d0")))
    rest = api.post(f"/api/v1/workers/{LONG_ID}/approve-return")
    assert rest.status_code == 422 and rest.json()["detail"][0]["loc"] == ["path", "worker_id"], rest.text
    rpc = grpc_error(stub.ApproveWorkerReturn, pb.ValidateApproveReturnRequest(worker_id=LONG_ID))
    assert rpc.code() == grpc.StatusCode.INVALID_ARGUMENT and rpc.details().startswith("worker_id:"), rpc.details()
    # A connected worker needs no approval to re-claim its id: the same refusal at both.
    same_error(api.post("/api/v1/workers/d0/approve"),
               grpc_error(stub.ApproveWorker, pb.ApproveWorkerRequest(worker_id="d0")))
    long_fp = "f" * 65
    rest = api.post("/api/v1/workers/gone/approve", params={"credential_fingerprint": long_fp})
    assert rest.status_code == 422 and rest.json()["detail"][0]["loc"] == ["query", "credential_fingerprint"], rest.text
    rpc = grpc_error(stub.ApproveWorker, pb.ApproveWorkerRequest(worker_id="gone", credential_fingerprint=long_fp))
    assert rpc.code() == grpc.StatusCode.INVALID_ARGUMENT, rpc.details()
    assert rpc.details().startswith("credential_fingerprint:"), rpc.details()


def test_import_baselines(api, stub):
    rest = api.post("/api/v1/baselines/import", json={"entries": [ENTRY]})
    assert rest.status_code == 200 and rest.json() == {"imported": 1}, rest.text
    other = {**ENTRY, "dtype": "float32"}
    assert stub.ImportBaselines(pb.BaselineTable(entries=[pb.BaselineEntry(**other)]), timeout=60).imported == 1
    keys = sorted(e["key"] for e in api.get("/api/v1/baselines").json()["entries"])
    assert keys == sorted(e.key for e in stub.ExportBaselines(pb.ExportBaselinesRequest(), timeout=60).entries)
    assert len(keys) == 2
    bad = {**ENTRY, "samples": []}
    same_invalid_field(api.post("/api/v1/baselines/import", json={"entries": [bad]}),
                       grpc_error(stub.ImportBaselines, pb.BaselineTable(entries=[pb.BaselineEntry(**bad)])),
                       "entries.0.samples")


def test_localize(cl, api, stub):
    job = stub.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
        world_size=2, placement=pb.Placement(worker_ids=["d0", "d1"]),
        collective=pb.CollectiveSpec(op="all_reduce", sizes=[65536], iters=3))), timeout=60)
    assert cl.wait_job(job.id).state == pb.SUCCEEDED
    rest = api.post(f"/api/v1/jobs/{job.id}/localize")
    assert rest.status_code == 200, rest.text
    rpc = stub.Localize(pb.LocalizeRequest(job_id=job.id, tolerance=0.8), timeout=300)
    # Two workers and no spare one: neither door names anyone, in the same words.
    assert rest.json()["culprits"] == [] == list(rpc.culprits) and rest.json()["verdict"] == rpc.verdict
    same_error(api.post("/api/v1/jobs/nope/localize"), grpc_error(stub.Localize, pb.LocalizeRequest(job_id="nope")))
    # A test size beyond 1 TiB is refused before the job is looked up (gRPC said NOT_FOUND before).
    rest = api.post("/api/v1/jobs/nope/localize", params={"size_bytes": 1 << 41})
    assert rest.status_code == 422 and rest.json()["detail"][0]["loc"] == ["query", "size_bytes"], rest.text
    rpc = grpc_error(stub.Localize, pb.LocalizeRequest(job_id="nope", size_bytes=1 << 41))
    assert rpc.code() == grpc.StatusCode.INVALID_ARGUMENT and rpc.details().startswith("size_bytes:"), rpc.details()

