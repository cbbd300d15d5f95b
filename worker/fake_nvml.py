"""FAKE NVML, the fault injector's NVML layer (tests only): the pynvml functions worker/telemetry.py
calls, answering as a healthy H100 SXM until the test writes a fault into a file:

    RINGLEADER_FAKE_NVML=/path/file  (with RINGLEADER_FAULTS_ALLOWED=tests; worker/faults.py)

The file holds name=value pairs separated by commas, read on every call, so a test makes an idle
GPU develop a fault at a moment it knows (and clears it again):

    xid=79                 an XID critical-error event (each new value is one event)
    throttle=0x40          clocks event reasons (0x40: HW thermal slowdown, 0x80: power brake)
    foreign_mib=2048       a process that is not the worker's holds this much memory
    own_mib=500            the process reading NVML (the worker's own) holds this much memory
    pcie_width=8           the PCIe link trained at x8 (of x16)
    ecc_dbe=1              uncorrected (double bit) ECC errors, volatile
    nvlink_down=1          NVLink links not active
    remap_failed=1         a row remapping failed

Named FAKE everywhere it is used: the readings it gives carry GpuTelemetry.fake = true.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
NVML_CLOCK_SM = 1
nvmlEventTypeXidCriticalError = 8
FOREIGN_PID = 4_000_000  # above pid_max's default: never one of the worker's own


class NVMLError(Exception):
    pass


class FakeNvml:
    """The fake module: constants above, functions below (each takes the handle it is given)."""

    NVMLError = NVMLError

    def __init__(self, path: str) -> None:
        self.path = path
        self._xid_delivered = 0

    def __getattr__(self, name: str):
        return globals()[name]  # the module's constants, as pynvml has them

    def _faults(self) -> dict[str, int]:
        try:
            with open(self.path) as f:
                text = f.read()
        except OSError:
            return {}
        out = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            name, _, value = item.partition("=")
            out[name.strip()] = int(value.strip(), 0)
        return out

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 41

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return 87

    def nvmlDeviceGetPowerUsage(self, h):
        return 72_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return self._faults().get("ecc_dbe", 0) if kind == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetRemappedRows(self, h):
        return 0, 0, 0, self._faults().get("remap_failed", 0)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._faults().get("throttle", 0x1)  # 0x1: idle

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 345 if not self._faults().get("throttle") else 210

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._faults().get("pcie_width", 16)

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=0, memory=0)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise NVMLError("no such link")
        return 0 if link < self._faults().get("nvlink_down", 0) else 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        f = self._faults()
        own = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=f["own_mib"] << 20)] if f.get("own_mib") else []
        mib = f.get("foreign_mib", 0)
        return own + ([SimpleNamespace(pid=FOREIGN_PID, usedGpuMemory=mib << 20)] if mib else [])

    def nvmlEventSetCreate(self):
        return object()

    def nvmlDeviceRegisterEvents(self, h, types, events):
        return None

    def nvmlEventSetWait(self, events, timeout_ms):
        """The next XID the file names (a new value is a new event), else a timeout."""
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            xid = self._faults().get("xid", 0)
            if xid and xid != self._xid_delivered:
                self._xid_delivered = xid
                return SimpleNamespace(eventData=xid)
            time.sleep(0.05)
        raise NVMLError("Timeout")
