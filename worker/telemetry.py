"""GPU telemetry through NVML: what DCGM's first level and NVSentinel watch, sampled continuously
and cheaply on every GPU worker, sent with each heartbeat (Heartbeat.telemetry) and exported as
Prometheus metrics (worker/metrics.py). The rules that turn readings into verdicts are the
coordinator's (coordinator/health/telemetry_rules.py): a worker reports, it does not judge.

Two threads per GPU: one samples every SAMPLE_S (ECC, retired pages and remapped rows, throttle
reasons, SM clock, temperature and power against their limits, PCIe generation and width, NVLink
state and error counters, processes on the device); one waits on NVML's XID event set, so an
XID is seen as it happens, not at the next sample. A reading NVML does not support on this GPU is
left unset. `nvml` is the pynvml module, or in tests the fault injector's FAKE NVML
(worker/fake_nvml.py), which has the same functions.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.worker")

SAMPLE_S = 0.5  # with a 1 s heartbeat, a fault is at the coordinator within 1.5 s
XID_WINDOW_S = 300.0  # XIDs are reported this long after they happen
_NVLINK_MAX = 18
# NVML's NVLink error counters: DL replay, DL recovery, DL CRC flit.
_NVLINK_COUNTERS = (0, 1, 2)


class Telemetry:
    def __init__(self, nvml, handle, own_pid: int | None = None, fake: bool = False) -> None:
        self.nvml, self.handle, self.fake = nvml, handle, fake
        self.own_pid = own_pid or os.getpid()
        self._own: set[int] = set()
        self._walked_for: set[int] = set()  # the pids NVML listed when the tree was last walked
        self._latest: wpb.GpuTelemetry | None = None
        self._xids: list[wpb.XidEvent] = []
        self._nvlink_base: int | None = None  # counters are since boot: report what grew since we started
        self._nvlink_up: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> "Telemetry":
        threading.Thread(target=self._sampling, name="gpu-telemetry", daemon=True).start()
        threading.Thread(target=self._xid_waiting, name="gpu-xid-events", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def latest(self) -> wpb.GpuTelemetry | None:
        with self._lock:
            return self._latest

    def _sampling(self) -> None:
        while not self._stop.is_set():
            reading = self.sample()
            with self._lock:
                self._latest = reading
            self._stop.wait(SAMPLE_S)

    def _xid_waiting(self) -> None:
        n = self.nvml
        try:
            events = n.nvmlEventSetCreate()
            n.nvmlDeviceRegisterEvents(self.handle, n.nvmlEventTypeXidCriticalError, events)
        except Exception as exc:  # NVMLError_NotSupported (some MIG or vGPU setups)
            log.info("no XID events from NVML: %s", exc)
            return
        while not self._stop.is_set():
            try:
                data = n.nvmlEventSetWait(events, 500)
            except Exception:  # NVMLError_Timeout: nothing happened
                continue
            self.xid(int(data.eventData))

    def xid(self, code: int) -> None:
        """An XID seen now: in every reading for XID_WINDOW_S, and in the very next heartbeat."""
        with self._lock:
            self._xids.append(wpb.XidEvent(code=code, at=time.time()))
            if self._latest is not None:  # a new message: the last one may be on its way out
                latest = wpb.GpuTelemetry()
                latest.CopyFrom(self._latest)
                latest.xids.append(self._xids[-1])
                self._latest = latest

    def sample(self) -> wpb.GpuTelemetry:
        t = wpb.GpuTelemetry(at=time.time(), fake=self.fake)
        now = t.at
        with self._lock:
            self._xids = [x for x in self._xids if now - x.at < XID_WINDOW_S]
            t.xids.extend(self._xids)
        try:
            self.nvml.nvmlDeviceGetTemperature(self.handle, self.nvml.NVML_TEMPERATURE_GPU)
        except Exception as exc:  # the GPU fell off the bus, the driver is gone: say so, and nothing else
            t.error = f"NVML: {exc}"[:200]
            return t
        for read in (_ecc, _pages, _clocks, _thermal, _pcie, _utilization):
            try:
                read(self.nvml, self.handle, t)
            except Exception as exc:  # NVMLError_NotSupported and kin: this reading stays unset
                log.debug("NVML %s: %s", read.__name__, exc)
        self._nvlink(t)
        self._foreign(t)
        return t

    def _nvlink(self, t: wpb.GpuTelemetry) -> None:
        """Links are the ones up at the worker's first sample (a machine may wire fewer than the
        GPU has, or lend a slice of an NVSwitch system): down is one of them gone down since."""
        n, errors, up_now = self.nvml, 0, set()
        for link in range(_NVLINK_MAX):
            try:
                up = n.nvmlDeviceGetNvLinkState(self.handle, link)
            except Exception:  # no such link
                continue
            if up:
                up_now.add(link)
            for counter in _NVLINK_COUNTERS:
                try:
                    errors += int(n.nvmlDeviceGetNvLinkErrorCounter(self.handle, link, counter))
                except Exception:
                    pass
        if self._nvlink_base is None:
            self._nvlink_base, self._nvlink_up = errors, up_now
        t.nvlink_links = len(self._nvlink_up)
        t.nvlink_down = len(self._nvlink_up - up_now)
        t.nvlink_errors = max(0, errors - self._nvlink_base)

    def _foreign(self, t: wpb.GpuTelemetry) -> None:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except Exception:
            return
        if not procs:
            return
        # The daemon's tree is walked again only when NVML lists a pid it did not list at the last
        # walk (a new executor, or a new foreign process): each walk reads every /proc entry with
        # the GIL held, 0.6 s in 10 s of a busy daemon on a 64-core host (py-spy). A process that
        # stays (a co-tenant's executor on a shared GPU) is not a reason to walk again.
        listed = {int(p.pid) for p in procs}
        if not listed <= self._walked_for:
            self._own = own_pids(self.own_pid)
        self._walked_for = listed  # a pid gone and listed again (reused, perhaps) is walked for again
        for p in procs:
            if int(p.pid) in self._own:
                t.own_pids.append(int(p.pid))
            else:
                t.foreign.add(pid=int(p.pid), used_bytes=int(getattr(p, "usedGpuMemory", 0) or 0))


def _ecc(n, h, t) -> None:
    get = n.nvmlDeviceGetTotalEccErrors
    t.ecc_volatile_sbe = get(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)
    t.ecc_volatile_dbe = get(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
    t.ecc_aggregate_sbe = get(h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC)
    t.ecc_aggregate_dbe = get(h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC)


def _pages(n, h, t) -> None:
    try:
        _, _, pending, failed = n.nvmlDeviceGetRemappedRows(h)  # Ampere and later
        t.remapped_rows_pending, t.remapped_rows_failed = bool(pending), bool(failed)
    except Exception:
        t.retired_pages_pending = bool(n.nvmlDeviceGetRetiredPagesPendingStatus(h))  # before Ampere


def _clocks(n, h, t) -> None:
    t.throttle_reasons = int(n.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    t.sm_clock_mhz = int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
    t.max_sm_clock_mhz = int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))


def _thermal(n, h, t) -> None:
    t.temperature_c = float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
    t.power_w = n.nvmlDeviceGetPowerUsage(h) / 1000.0
    t.power_limit_w = n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
    t.slowdown_temperature_c = float(n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))


def _pcie(n, h, t) -> None:
    t.pcie_gen, t.pcie_max_gen = int(n.nvmlDeviceGetCurrPcieLinkGeneration(h)), int(n.nvmlDeviceGetMaxPcieLinkGeneration(h))
    t.pcie_width, t.pcie_max_width = int(n.nvmlDeviceGetCurrPcieLinkWidth(h)), int(n.nvmlDeviceGetMaxPcieLinkWidth(h))


def _utilization(n, h, t) -> None:
    t.utilization_pct = int(n.nvmlDeviceGetUtilizationRates(h).gpu)


def own_pids(root: int) -> set[int]:
    """`root` and its descendants (the daemon and its executor), from /proc. (NVML reports host
    pids: in a container without the host's pid namespace every process would look foreign, so
    the worker DaemonSet runs with hostPID.)"""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def open_for(device) -> Telemetry | None:
    """The running sampler of a daemon's device (worker/api.py DeviceInfo): the fault injector's
    FAKE NVML when a test asked for it, else NVML for a GPU; None for a CPU worker or no NVML."""
    from worker import faults

    path = faults.fake_nvml_path()
    if path:
        from worker import fake_nvml

        return Telemetry(fake_nvml.FakeNvml(path), 0, fake=True).start()
    if device is None or device.type != "cuda":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = _handle(pynvml, device)
    except Exception as exc:  # no driver, no module: the worker runs without telemetry
        log.warning("no GPU telemetry (%s: %s)", type(exc).__name__, exc)
        return None
    return Telemetry(pynvml, handle).start()


def _handle(nvml, device):
    """By UUID (CUDA_VISIBLE_DEVICES renumbers devices for CUDA but not for NVML), else by index."""
    uuid = device.uuid or ""
    for candidate in filter(None, (uuid, f"GPU-{uuid}" if uuid and not uuid.startswith(("GPU-", "MIG-")) else "")):
        try:
            return nvml.nvmlDeviceGetHandleByUUID(candidate)
        except Exception:
            continue
    return nvml.nvmlDeviceGetHandleByIndex(device.index)


# ---- Prometheus (worker/metrics.py asks for these on each scrape) --------------------------------

# name, help, what it reads (a reading's value; seconds, watts, celsius, hertz as Prometheus names them)
_GAUGES = (
    ("ringleader_worker_gpu_xid_recent", "XID events in the last 5 minutes", lambda t: len(t.xids)),
    ("ringleader_worker_gpu_ecc_volatile_sbe", "Corrected ECC errors since the driver loaded", lambda t: t.ecc_volatile_sbe),
    ("ringleader_worker_gpu_ecc_volatile_dbe", "Uncorrected ECC errors since the driver loaded", lambda t: t.ecc_volatile_dbe),
    ("ringleader_worker_gpu_ecc_aggregate_sbe", "Corrected ECC errors over the GPU's life", lambda t: t.ecc_aggregate_sbe),
    ("ringleader_worker_gpu_ecc_aggregate_dbe", "Uncorrected ECC errors over the GPU's life", lambda t: t.ecc_aggregate_dbe),
    ("ringleader_worker_gpu_memory_repair_pending", "1 while a row remapping or page retirement waits for a reset",
     lambda t: int(t.remapped_rows_pending or t.retired_pages_pending)),
    ("ringleader_worker_gpu_row_remap_failed", "1 when a row remapping failed", lambda t: int(t.remapped_rows_failed)),
    ("ringleader_worker_gpu_clocks_event_reasons", "NVML's clocks event (throttle) reasons, a bit mask",
     lambda t: t.throttle_reasons),
    ("ringleader_worker_gpu_sm_clock_hertz", "SM clock", lambda t: t.sm_clock_mhz * 1e6),
    ("ringleader_worker_gpu_sm_clock_max_hertz", "SM clock maximum", lambda t: t.max_sm_clock_mhz * 1e6),
    ("ringleader_worker_gpu_temperature_celsius", "GPU temperature", lambda t: t.temperature_c),
    ("ringleader_worker_gpu_slowdown_temperature_celsius", "Temperature the GPU slows down at",
     lambda t: t.slowdown_temperature_c),
    ("ringleader_worker_gpu_power_watts", "Power draw", lambda t: t.power_w),
    ("ringleader_worker_gpu_power_limit_watts", "Enforced power limit", lambda t: t.power_limit_w),
    ("ringleader_worker_gpu_pcie_link_generation", "PCIe link generation now", lambda t: t.pcie_gen),
    ("ringleader_worker_gpu_pcie_link_generation_max", "PCIe link generation maximum", lambda t: t.pcie_max_gen),
    ("ringleader_worker_gpu_pcie_link_width", "PCIe link width now (lanes)", lambda t: t.pcie_width),
    ("ringleader_worker_gpu_pcie_link_width_max", "PCIe link width maximum (lanes)", lambda t: t.pcie_max_width),
    ("ringleader_worker_gpu_nvlink_links_down", "NVLink links down of those up when the worker started",
     lambda t: t.nvlink_down),
    ("ringleader_worker_gpu_nvlink_errors", "NVLink CRC, replay and recovery errors since the worker started",
     lambda t: t.nvlink_errors),
    ("ringleader_worker_gpu_foreign_processes", "Processes on the GPU that are not the worker's", lambda t: len(t.foreign)),
    ("ringleader_worker_gpu_foreign_memory_bytes", "GPU memory held by processes that are not the worker's",
     lambda t: sum(p.used_bytes for p in t.foreign)),
)


def metric_families(readings: list[tuple[list[str], wpb.GpuTelemetry]], labels: list[str]) -> list:
    """Gauges of each daemon's last reading ((label values, reading) pairs; labels: the device's)."""
    from prometheus_client.core import GaugeMetricFamily

    out = []
    for name, text, read in _GAUGES:
        family = GaugeMetricFamily(name, text, labels=labels)
        for ids, t in readings:
            if not t.error:
                family.add_metric(ids, float(read(t)))
        out.append(family)
    return out
