"""The worker's probe endpoints (/healthz, /readyz) on its real metrics HTTP server, answering for
fake daemons: a real daemon needs a coordinator and an executor, and what is checked here is only
how the server reads a daemon's state."""

import asyncio
import time
import types
import urllib.error
import urllib.request

import pytest

from worker import health
from worker.api import DeviceInfo
from worker.metrics import WorkerMetrics


class FakeDaemon:
    """The attributes of worker.daemon.WorkerDaemon that the probes and the metrics read."""

    def __init__(self, device: str = "cuda:0") -> None:
        self.config = types.SimpleNamespace(device=device, coordinator="coordinator:50051")
        self.worker_id = f"w-{device}"
        self.device: dict = {}  # empty until the executor has started
        self.connected = asyncio.Event()
        self.job = None
        self.restarts = 0
        self.jobs_done: dict = {}
        self.loop_alive_at = time.monotonic()

    def ops_run(self) -> int:
        return 0

    def registered(self) -> "FakeDaemon":
        index = int(self.config.device.split(":")[1])
        self.device = DeviceInfo(type="cuda", index=index, name="NVIDIA H200",
                                 uuid=f"0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
                                 memory_bytes=140 << 30, backend="nccl")
        self.connected.set()
        return self


@pytest.fixture
def server():
    metrics = WorkerMetrics()
    port = metrics.serve("127.0.0.1", 0)
    yield metrics, f"http://127.0.0.1:{port}"
    metrics.close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_ready_only_when_every_daemon_is_registered(server):
    metrics, url = server
    assert get(url + "/readyz") == (503, "no worker daemon started yet\n")
    a, b = FakeDaemon("cuda:0"), FakeDaemon("cuda:1")
    metrics.add([a, b])
    assert get(url + "/readyz") == (503, "cuda:0: executor starting\n")
    a.registered()
    b.device = DeviceInfo("cuda", 1, "", "", 0, "nccl")
    assert get(url + "/readyz") == (503, "cuda:1: not registered with the coordinator coordinator:50051\n")
    b.registered().job = ("job-1", 0)
    assert get(url + "/readyz") == (200, "ready: cuda:0 IDLE, cuda:1 BUSY\n")
    a.connected.clear()  # the coordinator went away: the daemon reconnects, the pod is not ready
    assert get(url + "/readyz")[0] == 503
    # Metrics are still served next to the probes, with dcgm-exporter's GPU labels.
    status, body = get(url + "/metrics")
    assert status == 200
    assert 'ringleader_worker_busy{UUID="GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",device="cuda:1",gpu="1"} 1.0' in body


def test_live_until_a_daemon_loop_stalls(server):
    metrics, url = server
    assert get(url + "/healthz")[0] == 200  # no daemon yet: the process is starting
    d = FakeDaemon("cuda:3")
    metrics.add([d])
    assert get(url + "/healthz") == (200, "alive (1 daemon)\n")
    d.loop_alive_at = time.monotonic() - health.LOOP_STALL_S - 5
    status, body = get(url + "/healthz")
    assert status == 503 and body.startswith("cuda:3: event loop has not run for 2")
    # Liveness does not depend on the coordinator: a disconnected daemon is alive.
    d.loop_alive_at = time.monotonic()
    assert not d.connected.is_set() and get(url + "/healthz")[0] == 200


def test_a_real_daemon_stamps_its_loop_while_running():
    """The stamp comes from the daemon's own loop (worker/daemon.py), not from a timer thread."""
    from worker.daemon import WorkerConfig, WorkerDaemon

    async def main():
        d = WorkerDaemon(WorkerConfig(coordinator="127.0.0.1:1", device="cpu", advertise_host="127.0.0.1"))
        before = d.loop_alive_at
        ticker = asyncio.create_task(d._tick())
        await asyncio.sleep(0.05)
        ticked = d.loop_alive_at
        d.stop()
        await asyncio.wait_for(ticker, 3)
        return before, ticked

    before, ticked = asyncio.run(main())
    assert ticked > before
