"""GPU telemetry end to end: a real coordinator and a real worker daemon whose NVML is the fault
injector's FAKE NVML (worker/fake_nvml.py; no GPU in CI, named as such). The idle worker's GPU
develops a fault (the test writes it into the FAKE NVML's file), and the worker must carry the
verdict its rule names, with the evidence, within 2 s, no job or check running; cleared, it is
healthy again."""

from __future__ import annotations

import statistics
import time

import pytest

from cluster import Cluster
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

FAULTS = [  # (fault written, rule, verdict, evidence)
    ("throttle=0x40", "throttle", pb.SUSPECT, "HW thermal slowdown"),
    ("foreign_mib=2048", "foreign_process", pb.SUSPECT, "holding 2048 MiB"),
    ("pcie_width=8", "pcie_downgrade", pb.SUSPECT, "x8 of gen5 x16"),
    ("xid=13", "xid", pb.SUSPECT, "XID 13"),  # last: an XID is reported for 5 minutes
]
TOOK: list[float] = []


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("telemetry")
    path = tmp / "nvml-faults"
    path.write_text("")
    c = Cluster(tmp)
    try:
        c.start_coordinator()
        c.start_worker("g0", env={"RINGLEADER_FAKE_NVML": str(path), "RINGLEADER_FAULTS_ALLOWED": "tests"})
        c.wait_idle(["g0"])
        yield c, path
    finally:
        c.close()
    if TOOK:
        print(f"\ntelemetry fault -> verdict: {', '.join(f'{t:.2f}' for t in TOOK)} s "
              f"(median {statistics.median(TOOK):.2f})")


def _health(c) -> tuple[int, pb.WorkerHealth]:
    (w,) = c.client.workers()
    return w.state, w.health


def _until(c, want, timeout: float = 15.0) -> tuple[float, pb.WorkerHealth]:
    t0 = time.monotonic()
    while True:
        state, h = _health(c)
        if want(h):
            return time.monotonic() - t0, h
        assert time.monotonic() - t0 < timeout, h
        time.sleep(0.05)


@pytest.mark.parametrize("fault, rule, verdict, evidence", FAULTS)
def test_an_idle_gpu_developing_a_fault_gets_its_rules_verdict_within_2_s(gpu, fault, rule, verdict, evidence):
    c, path = gpu
    state, before = _health(c)
    assert state == pb.IDLE and before.verdict in (pb.VERDICT_UNSPECIFIED, pb.HEALTHY)
    path.write_text(fault)
    took, h = _until(c, lambda h: h.check == "telemetry" and h.verdict == verdict)
    TOOK.append(took)
    assert h.figure.startswith(f"{rule}: ") and evidence in h.figure, h
    # 2 s on a quiet machine; the assertion leaves room for a loaded CI host (the figure is printed).
    assert took < 5.0, took
    if rule != "xid":
        path.write_text("")
        _until(c, lambda h: h.check == "telemetry" and h.verdict == pb.HEALTHY)
