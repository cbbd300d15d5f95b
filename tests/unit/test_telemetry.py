"""GPU telemetry: the sampler (worker/telemetry.py) read through the fault injector's FAKE NVML
(worker/fake_nvml.py, the same functions as pynvml), the rule table
(coordinator/health/telemetry_rules.py) and the Prometheus gauges. No GPU: the FAKE NVML is
named as such, and its readings say so (fake = true)."""

from __future__ import annotations

import time

import pytest

from coordinator.health import telemetry_rules as rules
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker import fake_nvml, faults, telemetry


def _sampler(tmp_path, text: str = ""):
    path = tmp_path / "nvml-faults"
    path.write_text(text)
    return telemetry.Telemetry(fake_nvml.FakeNvml(str(path)), 0, fake=True), path


def _fired(t: wpb.GpuTelemetry) -> dict[str, int]:
    return {f.rule: f.verdict for f in rules.verdicts("w0", t)}


def test_a_healthy_idle_gpu_fires_no_rule(tmp_path):
    s, _ = _sampler(tmp_path)
    t = s.sample()
    assert t.fake and not t.error and t.temperature_c == 41 and t.power_limit_w == 700
    assert (t.pcie_width, t.pcie_max_width, t.nvlink_links, t.nvlink_down) == (16, 16, 18, 0)
    assert _fired(t) == {} and rules.health([], 5.0).verdict == pb.HEALTHY


@pytest.mark.parametrize("fault, rule, verdict, evidence", [
    ("throttle=0x40", "throttle", pb.SUSPECT, "HW thermal slowdown"),
    ("foreign_mib=2048", "foreign_process", pb.SUSPECT, f"pid {fake_nvml.FOREIGN_PID} holding 2048 MiB"),
    ("pcie_width=8", "pcie_downgrade", pb.SUSPECT, "PCIe gen5 x8 of gen5 x16"),
    ("ecc_dbe=2", "ecc_dbe", pb.UNHEALTHY, "2 uncorrected ECC errors"),
    ("nvlink_down=1", "nvlink_down", pb.UNHEALTHY, "1 of 18 NVLink links down"),
    ("remap_failed=1", "row_remap_failed", pb.UNHEALTHY, "a row remapping failed"),
])
def test_each_fault_fires_the_rule_that_names_it(tmp_path, fault, rule, verdict, evidence):
    s, path = _sampler(tmp_path)
    assert _fired(s.sample()) == {}  # healthy at the worker's start (NVLink: the links up then count)
    path.write_text(fault)
    t = s.sample()
    assert _fired(t) == {rule: verdict}
    h = rules.health(rules.verdicts("w0", t), 5.0)
    assert h.verdict == verdict and h.check == "telemetry" and evidence in h.figure and h.expected


def test_an_xid_is_seen_as_it_happens_and_classed(tmp_path):
    s, path = _sampler(tmp_path)
    s.start()
    try:
        deadline = time.monotonic() + 10
        while s.latest() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        path.write_text("xid=13")  # a graphics engine exception: suspect
        while not s.latest().xids:
            assert time.monotonic() < deadline, "the XID event never reached the readings"
            time.sleep(0.05)
        assert [x.code for x in s.latest().xids] == [13] and _fired(s.latest()) == {"xid": pb.SUSPECT}
        path.write_text("xid=79")  # fallen off the bus: failed, and the earlier one still shown
        while len(s.latest().xids) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _fired(s.latest()) == {"xid_fatal": pb.UNHEALTHY, "xid": pb.SUSPECT}
        assert rules.health(rules.verdicts("w0", s.latest()), 1.0).figure.startswith("xid_fatal: XID 79")
    finally:
        s.stop()


def test_rules_under_load_and_an_unreachable_gpu():
    busy = wpb.GpuTelemetry(utilization_pct=95, sm_clock_mhz=600, max_sm_clock_mhz=1980, pcie_gen=3, pcie_max_gen=5,
                            pcie_width=16, pcie_max_width=16)
    assert _fired(busy) == {"sm_clock": pb.SUSPECT, "pcie_downgrade": pb.SUSPECT}
    idle = wpb.GpuTelemetry(sm_clock_mhz=300, max_sm_clock_mhz=1980, pcie_gen=1, pcie_max_gen=5)
    assert _fired(idle) == {}  # an idle GPU clocks down and drops its PCIe generation: no fault
    hot = wpb.GpuTelemetry(temperature_c=86, slowdown_temperature_c=87, power_w=760, power_limit_w=700, nvlink_errors=150)
    assert _fired(hot) == {"temperature": pb.SUSPECT, "power": pb.SUSPECT, "nvlink_errors": pb.SUSPECT}
    assert _fired(wpb.GpuTelemetry(error="NVML: GPU is lost")) == {"nvml_unreachable": pb.UNHEALTHY}


def test_the_worker_and_its_children_are_not_foreign(tmp_path):
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert {os.getpid(), child.pid} <= telemetry.own_pids(os.getpid())
        assert 1 not in telemetry.own_pids(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_the_fake_nvml_is_for_tests_only(tmp_path):
    with pytest.raises(faults.FaultsRefused, match="RINGLEADER_FAKE_NVML"):
        faults.fake_nvml_path({faults.FAKE_NVML_ENV: "/tmp/x"})
    assert faults.fake_nvml_path({faults.FAKE_NVML_ENV: "/tmp/x", faults.CONSENT_ENV: "tests"}) == "/tmp/x"
    assert faults.fake_nvml_path({}) == ""


def test_readings_as_gauges_with_the_device_labels(tmp_path):
    s, _ = _sampler(tmp_path, "foreign_mib=1,throttle=0x80")
    families = {f.name: f for f in telemetry.metric_families([(["cuda:0", "0", "GPU-x"], s.sample())],
                                                            ["device", "gpu", "UUID"])}
    assert families["ringleader_worker_gpu_foreign_memory_bytes"].samples[0].value == 1 << 20
    assert families["ringleader_worker_gpu_clocks_event_reasons"].samples[0].value == 0x80
    assert families["ringleader_worker_gpu_power_limit_watts"].samples[0].labels == {"device": "cuda:0", "gpu": "0",
                                                                                     "UUID": "GPU-x"}


def test_the_workers_own_process_is_reported_apart_and_a_staying_stranger_costs_one_walk(tmp_path, monkeypatch):
    """The worker's own process on the GPU goes in own_pids (what excuses it in a co-tenant's
    telemetry), a stranger in foreign; the daemon's tree is walked again only when a pid NVML did
    not list at the last walk appears, not at every sample while a co-tenant stays on the GPU."""
    walks = []
    real = telemetry.own_pids
    monkeypatch.setattr(telemetry, "own_pids", lambda root: walks.append(root) or real(root))
    s, path = _sampler(tmp_path, "own_mib=500,foreign_mib=2048")
    for _ in range(3):
        t = s.sample()
        assert list(t.own_pids) == [s.own_pid] and [p.pid for p in t.foreign] == [fake_nvml.FOREIGN_PID]
    assert len(walks) == 1
    path.write_text("own_mib=500")  # the stranger left: nothing new listed, no walk
    assert not s.sample().foreign and len(walks) == 1
    path.write_text("own_mib=500,foreign_mib=64")  # it came back: listed again, walked again
    assert [p.pid for p in s.sample().foreign] == [fake_nvml.FOREIGN_PID] and len(walks) == 2
