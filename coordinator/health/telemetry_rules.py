"""GPU telemetry into verdicts: one table of rules, each a reading, a threshold and a verdict, as
DCGM's health watches and NVSentinel classify them. Pure: `verdicts(worker_id, readings)` is all
the coordinator calls (readings: workers_pb2.GpuTelemetry from a heartbeat).

failed (quarantine): what needs a reset or a replacement before the GPU can be trusted: an XID of
the fatal class (48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92
high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP), an uncorrected ECC error since the
driver loaded, a failed row remapping, an NVLink link down, NVML no longer answering.
suspect (no quarantine; a recheck decides): what makes a job slow or hints at a fault: another
XID, a remapping or page retirement pending, a hardware or thermal slowdown or power brake, a
temperature at its slowdown threshold, a PCIe link below its width (or, under load, generation),
NVLink errors growing, another process on the GPU, an SM clock far below its maximum under load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

SUSPECT, FAILED = pb.SUSPECT, pb.UNHEALTHY

FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
# NVML clocks event reasons that are faults, not policy: SW thermal, HW slowdown, HW thermal, power brake.
THROTTLE_FAULTS = {0x20: "SW thermal slowdown", 0x8: "HW slowdown", 0x40: "HW thermal slowdown",
                   0x80: "HW power brake slowdown"}
NVLINK_ERRORS_SUSPECT = 100  # CRC, replay, recovery errors since the worker started
BUSY_PCT = 50  # "under load": above this utilization, a low clock or PCIe generation means something
CLOCK_SHARE = 0.5
TEMPERATURE_MARGIN_C = 3.0


@dataclass(frozen=True)
class Finding:
    rule: str
    verdict: int  # SUSPECT or FAILED
    figure: str
    expected: str


@dataclass(frozen=True)
class Rule:
    name: str
    verdict: int
    expected: str
    figure: Callable[[wpb.GpuTelemetry], str]  # "" when the rule does not fire


def _xids(fatal: bool) -> Callable[[wpb.GpuTelemetry], str]:
    def figure(t: wpb.GpuTelemetry) -> str:
        codes = sorted({x.code for x in t.xids if (x.code in FATAL_XIDS) == fatal})
        return f"XID {', '.join(map(str, codes))}" if codes else ""
    return figure


def _throttle(t: wpb.GpuTelemetry) -> str:
    names = [name for bit, name in THROTTLE_FAULTS.items() if t.throttle_reasons & bit]
    return f"clocks slowed: {', '.join(names)} (reasons 0x{t.throttle_reasons:x}), SM {t.sm_clock_mhz} MHz" if names else ""


def _foreign(t: wpb.GpuTelemetry) -> str:
    return "; ".join(f"foreign process pid {p.pid} holding {p.used_bytes / 2**20:.0f} MiB" for p in t.foreign)


def _pcie(t: wpb.GpuTelemetry) -> str:
    narrow = t.pcie_max_width and t.pcie_width < t.pcie_max_width
    slow = t.pcie_max_gen and t.pcie_gen < t.pcie_max_gen and t.utilization_pct > BUSY_PCT  # idle GPUs drop gen
    return f"PCIe gen{t.pcie_gen} x{t.pcie_width} of gen{t.pcie_max_gen} x{t.pcie_max_width}" if narrow or slow else ""


def _if(cond: Callable[[wpb.GpuTelemetry], bool], text: Callable[[wpb.GpuTelemetry], str]):
    return lambda t: text(t) if cond(t) else ""


RULES: tuple[Rule, ...] = (
    Rule("nvml_unreachable", FAILED, "NVML answers for the GPU", lambda t: t.error),
    Rule("xid_fatal", FAILED, f"no XID of the fatal class ({', '.join(map(str, sorted(FATAL_XIDS)))}) "
         "in the last 5 minutes", _xids(True)),
    Rule("xid", SUSPECT, "no XID in the last 5 minutes", _xids(False)),
    Rule("ecc_dbe", FAILED, "0 uncorrected ECC errors since the driver loaded",
         _if(lambda t: t.ecc_volatile_dbe > 0, lambda t: f"{t.ecc_volatile_dbe} uncorrected ECC errors (volatile)")),
    Rule("row_remap_failed", FAILED, "no failed row remapping",
         _if(lambda t: t.remapped_rows_failed, lambda t: "a row remapping failed")),
    Rule("nvlink_down", FAILED, "every NVLink link active",
         _if(lambda t: t.nvlink_down > 0, lambda t: f"{t.nvlink_down} of {t.nvlink_links} NVLink links down")),
    Rule("reset_pending", SUSPECT, "no row remapping or page retirement waiting for a reset",
         _if(lambda t: t.remapped_rows_pending or t.retired_pages_pending, lambda t: "memory repair pending a reset")),
    Rule("throttle", SUSPECT, "no thermal, hardware or power-brake slowdown", _throttle),
    Rule("temperature", SUSPECT, f"temperature more than {TEMPERATURE_MARGIN_C:g} C below its slowdown threshold",
         _if(lambda t: t.slowdown_temperature_c > 0 and t.temperature_c >= t.slowdown_temperature_c - TEMPERATURE_MARGIN_C,
             lambda t: f"{t.temperature_c:.0f} C (slowdown at {t.slowdown_temperature_c:.0f} C)")),
    Rule("power", SUSPECT, "power within 5 % of its enforced limit",
         _if(lambda t: t.power_limit_w > 0 and t.power_w > 1.05 * t.power_limit_w,
             lambda t: f"{t.power_w:.0f} W of a {t.power_limit_w:.0f} W limit")),
    Rule("sm_clock", SUSPECT, f"SM clock at least {CLOCK_SHARE:g} x its maximum under load",
         _if(lambda t: t.utilization_pct > BUSY_PCT and t.max_sm_clock_mhz and t.sm_clock_mhz < CLOCK_SHARE * t.max_sm_clock_mhz,
             lambda t: f"SM {t.sm_clock_mhz} of {t.max_sm_clock_mhz} MHz at {t.utilization_pct} % busy")),
    Rule("pcie_downgrade", SUSPECT, "PCIe at its maximum width (and generation under load)", _pcie),
    Rule("nvlink_errors", SUSPECT, f"fewer than {NVLINK_ERRORS_SUSPECT} NVLink errors since the worker started",
         _if(lambda t: t.nvlink_errors >= NVLINK_ERRORS_SUSPECT, lambda t: f"{t.nvlink_errors} NVLink errors")),
    Rule("foreign_process", SUSPECT, "no process on the GPU but the worker's own", _foreign),
)


def verdicts(worker_id: str, readings: wpb.GpuTelemetry) -> list[Finding]:
    """Every rule that fires on the readings, worst first (worker_id: for the caller's records)."""
    found = [Finding(r.name, r.verdict, fig, r.expected) for r in RULES if (fig := r.figure(readings))]
    return sorted(found, key=lambda f: -f.verdict)


def health(found: list[Finding], at: float) -> pb.WorkerHealth:
    """One verdict for the worker from its findings (the worst), evidence joined; HEALTHY when none."""
    if not found:
        return pb.WorkerHealth(verdict=pb.HEALTHY, check="telemetry", figure="no telemetry rule fires",
                               expected="GPU telemetry within every rule (coordinator/health/telemetry_rules.py)", at=at)
    return pb.WorkerHealth(verdict=found[0].verdict, check="telemetry", at=at,
                           figure="; ".join(f"{f.rule}: {f.figure}" for f in found),
                           expected="; ".join(f.expected for f in found))
