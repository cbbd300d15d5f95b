"""Prometheus metrics end to end: a real coordinator (with HTTP) and two real CPU workers serving
their own /metrics; every scrape passes `promtool check metrics`."""

import asyncio
import shutil
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.edge.metrics import SIZE_BUCKET_LABELS, size_bucket
from ringleader.v1 import jobs_pb2 as pb
from ports import free_port
from worker.metrics import WorkerMetrics, parse_address

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (apt-get install prometheus)")



def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


def samples(text: str) -> list:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def value(text: str, name: str, **labels) -> float:
    """The one sample called `name` whose labels include `labels`."""
    found = [s for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, (name, labels, found)
    return found[0].value


def promtool_check(text: str) -> None:
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), p.stdout + p.stderr


# ---- units (no processes) ------------------------------------------------------------------


@pytest.mark.parametrize("size, label", [
    (0, "<=64K"), (8, "<=64K"), (64 << 10, "<=64K"), ((64 << 10) + 1, "<=1M"), (1 << 20, "<=1M"),
    (16 << 20, "<=16M"), ((16 << 20) + 4, "<=256M"), (256 << 20, "<=256M"), ((256 << 20) + 1, ">256M"),
    (8 << 30, ">256M"),
])
def test_size_bucket(size, label):
    assert size_bucket(size) == label
    assert label in SIZE_BUCKET_LABELS


def test_parse_metrics_address():
    assert parse_address("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_address(":9400") == ("0.0.0.0", 9400)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:port", "h:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


class FakeExecutor:
    """The part of an ExecutorHandle that metrics read, without a process."""

    def __init__(self, device="cpu", on_message=None, advertise="", ops=0):
        self.op_seq = ops

    async def kill(self):
        pass

    async def start(self):
        return object()  # the device a started executor reports (None: told to stop while starting)


def daemon(device="cpu", facts=None, ops=0):
    from worker.api import DeviceInfo
    from worker.daemon import WorkerConfig, WorkerDaemon

    d = WorkerDaemon(WorkerConfig(coordinator="127.0.0.1:1", device=device, worker_id=f"w-{device}",
                                  advertise_host="127.0.0.1"))
    d.device = DeviceInfo(**facts) if facts else None
    d.executor = FakeExecutor(ops=ops)
    return d


def test_worker_metrics_without_nvml_use_the_device_facts(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as on a machine without nvidia-ml-py
    gpu = daemon("cuda:1", dict(type="cuda", index=1, name="NVIDIA H200", uuid="", memory_bytes=140 << 30,
                                backend="nccl"), ops=7)
    cpu = daemon("cpu", dict(type="cpu", index=0, name="x86_64", uuid="", memory_bytes=1 << 30, backend="gloo"))
    text = WorkerMetrics([gpu, cpu]).render().decode()
    assert value(text, "ringleader_worker_device_memory_total_bytes", device="cuda:1") == 140 << 30
    # Without NVML, dcgm-exporter's gpu label is the daemon's own index.
    assert value(text, "ringleader_worker_busy", device="cuda:1", gpu="1", UUID="") == 0
    assert not [s for s in samples(text) if s.name == "ringleader_worker_device_memory_used_bytes"]
    assert value(text, "ringleader_worker_ops_total", device="cuda:1") == 7
    assert value(text, "ringleader_worker_connected", device="cpu") == 0
    assert value(text, "ringleader_worker_jobs_total", device="cpu", outcome="succeeded") == 0
    assert value(text, "ringleader_worker_host_memory_total_bytes") > 0
    assert value(text, "ringleader_worker_info", device="cuda:1", worker_id="w-cuda:1", backend="nccl") == 1
    if PROMTOOL:
        promtool_check(text)


def test_worker_ops_count_on_across_an_executor_replacement(monkeypatch):
    import worker.daemon

    monkeypatch.setattr(worker.daemon, "ExecutorHandle", FakeExecutor)
    d = daemon(ops=40)
    asyncio.run(d._replace_executor())
    assert d.restarts == 1
    assert d.ops_run() == 40
    d.executor.op_seq = 5
    assert d.ops_run() == 45


# ---- end to end ----------------------------------------------------------------------------


@pytest.mark.integration
@needs_promtool
def test_coordinator_and_worker_metrics(fresh_cluster):
    c = fresh_cluster
    c.start_coordinator(http=True)
    ports = {"m0": free_port("127.0.0.1"), "m1": free_port("127.0.0.1")}
    for wid, port in ports.items():
        c.start_worker(wid, metrics_address=f"127.0.0.1:{port}")
    c.wait_idle(ports)

    job = c.wait_job(c.submit(op="all_reduce", dtype="float32", sizes=[1024, 1 << 20]).id)
    assert job.state == pb.SUCCEEDED, job.reason
    with pytest.raises(grpc.RpcError) as err:
        c.client.get("no-such-job")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND

    # The client sees NOT_FOUND as soon as the status is sent; the server's interceptor records
    # the call when its handler unwinds, a moment later on the coordinator's loop.
    not_found = dict(grpc_method="GetJob", grpc_code="NOT_FOUND")
    deadline = time.monotonic() + 5
    text = scrape(c.http_url + "/metrics")
    while time.monotonic() < deadline and not any(
            s.name == "ringleader_grpc_server_handled_total" and not_found.items() <= s.labels.items()
            for s in samples(text)):
        time.sleep(0.05)
        text = scrape(c.http_url + "/metrics")
    promtool_check(text)
    # Jobs: one submitted, started cold, succeeded; nothing left in the queue.
    assert value(text, "ringleader_jobs_submitted_total") == 1
    assert value(text, "ringleader_jobs_started_total", warm="false") == 1
    assert value(text, "ringleader_jobs_finished_total", state="succeeded") == 1
    assert value(text, "ringleader_jobs_finished_total", state="failed") == 0
    assert value(text, "ringleader_jobs", state="queued") == 0
    assert value(text, "ringleader_jobs", state="running") == 0
    assert value(text, "ringleader_queue_depth") == 0
    assert value(text, "ringleader_job_queue_wait_seconds_count") == 1
    assert value(text, "ringleader_job_duration_seconds_count", state="succeeded") == 1
    assert value(text, "ringleader_job_duration_seconds_sum", state="succeeded") == pytest.approx(
        job.finished_at - job.started_at)
    # Workers: both idle, on gloo.
    assert value(text, "ringleader_workers", state="idle", backend="gloo") == 2
    assert value(text, "ringleader_workers", state="busy", backend="gloo") == 0
    # Collective results: one row per size, in its size bucket.
    by_size = {r.size_bytes: r for r in job.results}
    for size in (1024, 1 << 20):
        labels = dict(op="all_reduce", dtype="float32", world_size="2", size_bucket=size_bucket(size))
        # One result per size bucket here: the histogram's sum is that result's busbw.
        assert value(text, "ringleader_collective_busbw_bytes_per_second_count", **labels) == 1
        busbw = value(text, "ringleader_collective_busbw_bytes_per_second_sum", **labels)
        assert busbw > 0
        assert busbw == pytest.approx(by_size[size].busbw_gbps * 1e9)
        assert value(text, "ringleader_collective_op_latency_seconds_count", **labels) == 1
        assert value(text, "ringleader_collective_op_latency_seconds_sum", **labels) == pytest.approx(
            by_size[size].time_us * 1e-6)
    assert not [s for s in samples(text) if s.name == "ringleader_collective_wrong_results_total"]
    # gRPC: SubmitJob timed, GetJob's NOT_FOUND has its code, worker streams open and not timed.
    rpc = dict(grpc_service="ringleader.v1.JobService", grpc_type="unary")
    assert value(text, "ringleader_grpc_server_handling_seconds_count", grpc_method="SubmitJob",
                 grpc_code="OK", **rpc) == 1
    assert value(text, "ringleader_grpc_server_handling_seconds_sum", grpc_method="SubmitJob",
                 grpc_code="OK", **rpc) > 0
    assert value(text, "ringleader_grpc_server_handled_total", grpc_method="GetJob", grpc_code="NOT_FOUND",
                 **rpc) == 1
    assert value(text, "ringleader_grpc_server_streams_open", grpc_method="Connect") == 2
    assert not [s for s in samples(text) if s.labels.get("grpc_method") == "Connect"
                and s.name.startswith("ringleader_grpc_server_handling_seconds")]

    for wid, port in ports.items():
        wtext = scrape(f"http://127.0.0.1:{port}/metrics")
        promtool_check(wtext)
        assert value(wtext, "ringleader_worker_info", device="cpu", worker_id=wid, backend="gloo") == 1
        assert value(wtext, "ringleader_worker_connected", device="cpu") == 1
        assert value(wtext, "ringleader_worker_busy", device="cpu") == 0
        assert value(wtext, "ringleader_worker_executor_restarts_total", device="cpu") == 0
        assert value(wtext, "ringleader_worker_jobs_total", device="cpu", outcome="succeeded") == 1
        assert value(wtext, "ringleader_worker_jobs_total", device="cpu", outcome="executor_died") == 0
        # (warm-up 1 + timed 3) per size, at least; the mean and the distribution may add more.
        assert value(wtext, "ringleader_worker_ops_total", device="cpu") >= 2 * (1 + 3)
        assert value(wtext, "ringleader_worker_host_memory_total_bytes") > 0
        assert 0 < value(wtext, "ringleader_worker_host_memory_used_bytes") <= value(
            wtext, "ringleader_worker_host_memory_total_bytes")
        assert value(wtext, "ringleader_build_info", role="worker") == 1
