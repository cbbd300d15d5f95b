"""Configuration as evidence: the odd worker and setting named, and gangs that never mix the
settings NCCL needs equal (coordinator/health/fingerprints.py, the scheduler's lanes)."""

import dataclasses
import time

import pytest

from coordinator.core import admission
from coordinator.core.scheduler import Need, PendingJob, Scheduler, WorkerView, plan
from coordinator.health import fingerprints
from coordinator.health.fingerprints import FleetConfig, gang_key
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker import fingerprint as worker_fp


def fp(**settings) -> pb.ConfigFingerprint:
    return pb.ConfigFingerprint(software={"torch": "2.5.1", "nccl": "2.21.5", "ringleader": "0.1"},
                                topology={"nvlink_links": "18"}, settings=settings)


def view(wid, config="", idx=0, host="h1", idle=True):
    return WorkerView(wid, host, "cpu", idx, "cpu", 1 << 34, "gloo", idle, config=config)


def test_the_odd_worker_and_setting_are_named_and_the_others_are_not():
    fleet = FleetConfig()
    for i in range(3):
        fleet.add(f"w{i}", ("gloo", "cpu"), fp(NCCL_IB_DISABLE="1"))
    fleet.add("odd", ("gloo", "cpu"), fp(NCCL_IB_DISABLE="1", NCCL_PROTO="LL"))
    assert fleet.drift("odd") == "NCCL_PROTO=LL (3 others: unset)"
    assert [fleet.drift(f"w{i}") for i in range(3)] == ["", "", ""]
    assert fleet.drifting() == {"settings": 1}
    fleet.remove("odd")
    assert fleet.drifting() == {}


def test_a_tie_names_both_sides_and_per_host_settings_are_not_compared():
    fleet = FleetConfig()
    fleet.add("a", ("gloo", "cpu"), fp(NCCL_SOCKET_IFNAME="eth0", NCCL_HOSTID="a", NCCL_DEBUG="INFO"))
    fleet.add("b", ("gloo", "cpu"), fp(NCCL_SOCKET_IFNAME="ib0", NCCL_HOSTID="b", NCCL_PROTO="LL"))
    assert fleet.drift("a") == "NCCL_PROTO=unset (1 other: LL)"
    assert fleet.drift("b") == "NCCL_PROTO=LL (1 other: unset)"


def test_workers_are_compared_within_their_backend_and_model_only():
    fleet = FleetConfig()
    fleet.add("g0", ("nccl", "H200"), fp(NCCL_PROTO="Simple"))
    fleet.add("g1", ("nccl", "H200"), fp(NCCL_PROTO="Simple"))
    fleet.add("c0", ("gloo", "cpu"), fp())
    assert fleet.drift("c0") == fleet.drift("g0") == ""


def test_gang_key_holds_versions_and_gang_settings_only():
    base = gang_key(fp(NCCL_SOCKET_IFNAME="eth0", NCCL_DEBUG="INFO"))
    assert base == gang_key(fp(NCCL_SOCKET_IFNAME="ib0"))  # per host: not a gang's concern
    assert base != gang_key(fp(NCCL_PROTO="LL"))
    other = pb.ConfigFingerprint(software={"torch": "2.4.0", "nccl": "2.21.5"})
    assert "torch=2.4.0 vs 2.5.1" in fingerprints.gang_difference(gang_key(other), base)
    assert fingerprints.gang_difference(gang_key(fp(NCCL_PROTO="LL")), base) == "NCCL_PROTO=LL vs unset"


def test_a_gang_is_never_drawn_across_configurations():
    odd = gang_key(fp(NCCL_PROTO="LL"))
    base = gang_key(fp())
    fleet = [view("w0", base, 0), view("w1", base, 1), view("w2", odd, 2)]
    p = plan([PendingJob("three", 0, 0.0, Need(3))], fleet)
    assert p.decisions == []
    assert p.waiting["three"] == ("needs 3 workers with equal NCCL settings and versions, 3 gloo connected: "
                                  "2 alike; w2 differs (NCCL_PROTO=LL vs unset)")
    p = plan([PendingJob("two", 0, 0.0, Need(2))], fleet)
    assert [d.worker_ids for d in p.decisions] == [("w0", "w1")]


def test_a_warm_group_across_configurations_is_not_reused():
    odd, base = gang_key(fp(NCCL_PROTO="LL")), gang_key(fp())
    fleet = [view("w0", base, 0), view("w1", odd, 1), view("w2", base, 2)]
    p = plan([PendingJob("j", 0, 0.0, Need(2))], fleet, groups={"g": ("w0", "w1")})
    assert [(d.worker_ids, d.warm_group) for d in p.decisions] == [(("w0", "w2"), "")]


def test_a_job_naming_mismatched_workers_waits_naming_them():
    odd, base = gang_key(fp(NCCL_PROTO="LL")), gang_key(fp())
    fleet = [view("w0", base, 0), view("w1", odd, 1), view("w2", base, 2)]
    p = plan([PendingJob("j", 0, 0.0, Need(3, worker_ids=("w0", "w1", "w2")))], fleet)
    assert p.decisions == []
    assert "w1 differs (NCCL_PROTO=LL vs unset)" in p.waiting["j"]


def test_placement_with_mismatched_lanes_stays_fast_at_10000_workers():
    """Workers are grouped by their key, never compared in pairs: a pass over a fleet split into
    two configurations costs about what one over a uniform fleet does."""
    base, odd = gang_key(fp()), gang_key(fp(NCCL_PROTO="LL"))

    def run(split: bool) -> float:
        s = Scheduler()
        for i in range(10_000):
            s.put_worker(view(f"w{i}", odd if split and i % 2 else base, i % 8, f"h{i // 8}"))
        for j in range(2000):
            s.add(PendingJob(f"j{j}", 0, float(j), Need(8)))
        began = time.perf_counter()
        placed = s.place()
        took = time.perf_counter() - began
        assert len(placed) == 1250  # every idle worker placed, each gang of one lane
        lanes = {frozenset(v.config for v in map(s._fleet.views.get, d.worker_ids)) for d in placed}
        assert all(len(x) == 1 for x in lanes)
        return took

    uniform, split = min(run(False) for _ in range(2)), min(run(True) for _ in range(2))
    assert split < 3 * uniform + 0.05, (uniform, split)


def test_registration_bounds_the_fingerprint_naming_the_entry():
    reg = wpb.Register(worker_id="w", host="h", address="127.0.0.1", backend="gloo", device=pb.Device(type="cpu"))
    admission.check_registration(reg)
    reg.fingerprint.settings["NCCL_PROTO"] = "LL\x00"
    with pytest.raises(InvalidSpec, match=r"register.fingerprint.settings\[NCCL_PROTO\]"):
        admission.check_registration(reg)
    del reg.fingerprint.settings["NCCL_PROTO"]
    reg.fingerprint.settings["bad key!"] = "x"
    with pytest.raises(InvalidSpec, match="register.fingerprint.settings"):
        admission.check_registration(reg)
    reg.fingerprint.settings.clear()
    for i in range(admission.FP_ENTRIES + 1):
        reg.fingerprint.software[f"k{i}"] = "v"
    with pytest.raises(InvalidSpec, match="at most 64 entries"):
        admission.check_registration(reg)


def test_the_worker_reports_its_nccl_and_network_settings_bounded():
    env = {"NCCL_PROTO": "LL", "GLOO_SOCKET_IFNAME": "lo", "HOME": "/root", "PATH": "/bin",
           "NCCL_" + "X" * 80: "too long a name", "NCCL_BUFFSIZE": "9" * 999}
    found = worker_fp.build("cpu", (("torch", "2.5.1"),), environ=env)
    assert dict(found.settings) == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "9" * 256}
    assert found.software["torch"] == "2.5.1" and found.software["ringleader"]
    assert found.topology["cpus"]
    reg = wpb.Register(worker_id="w", host="h", address="127.0.0.1", backend="gloo", device=pb.Device(type="cpu"),
                       fingerprint=found)
    admission.check_registration(reg)  # what a worker sends is within what the coordinator accepts


def test_checks_and_rechecks_never_put_mismatched_workers_in_one_gang():
    from coordinator.health import recheck, sweeper

    def w(wid, proto="", verdict=pb.HEALTHY, check="gpu_check"):
        return pb.WorkerInfo(worker_id=wid, host="h0", backend="gloo", state=pb.IDLE,
                             device=pb.Device(type="cpu", name="cpu"),
                             fingerprint=fp(**({"NCCL_PROTO": proto} if proto else {})),
                             health=pb.WorkerHealth(verdict=verdict, check=check))
    fleet = [w("a"), w("b"), w("c", proto="LL"), w("d")]
    specs = sweeper.plan(fleet, ["gpu_check"])
    assert sorted(sorted(s.placement.worker_ids) for s in specs) == [["a", "b", "d"], ["c"]]
    fleet[0] = w("a", verdict=pb.UNHEALTHY)
    again = recheck.plan(fleet, ["a"], sweeper.short)
    assert [sorted(s.placement.worker_ids) for s in again] == [["a", "b", "d"]]


class StandInNvml:
    """A stand-in for pynvml (no GPU here), answering what an H200 with 18 NVLinks would."""

    def nvmlSystemGetDriverVersion(self):
        return b"560.35.03"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12060

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1


def test_a_gpu_worker_reports_its_driver_and_links_from_nvml():
    class Telemetry:
        nvml, handle, fake = StandInNvml(), object(), False

    found = worker_fp.build("cuda", (("torch", "2.5.1"), ("nccl", "2.21.5"), ("cuda", "12.4")), Telemetry(), environ={})
    assert found.software["driver"] == "560.35.03" and found.software["nccl"] == "2.21.5"
    assert dict(found.topology) == {"pcie_gen": "5", "pcie_width": "16", "nvlink_links": "18"}
