"""What a job's success depends on, as this worker can see it: the configuration fingerprint it
sends with its registration (Register.fingerprint). The coordinator groups the fleet by it, names
the odd worker and setting, and never starts a gang that mixes settings NCCL needs equal
(coordinator/health/fingerprints.py).

Three parts, each a map of bounded strings:
- software: ringleader and Python from the daemon; torch, CUDA and NCCL from the executor (the
  daemon never imports torch: `executor_software` runs in the executor and travels in its Ready);
  the driver from NVML;
- topology: NVML's active NVLink count and the PCIe link's generation and width (a GPU); the
  processor and its core count (a CPU worker);
- settings: the environment a job runs under: NCCL_*, GLOO_*, TORCH_NCCL_*, ... (`SETTING_PREFIXES`).

Everything here is best effort: what cannot be read is left out, never guessed.
"""

from __future__ import annotations

import os
import platform

from ringleader import __version__
from ringleader.v1 import jobs_pb2 as pb

# Environment settings that change what NCCL, gloo or torch.distributed do.
SETTING_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_GLOO_", "TORCH_DISTRIBUTED_", "FI_", "UCX_")
SETTING_NAMES = ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MODULE_LOADING", "TORCH_SYMM_MEM_DISABLE_MULTICAST")
# Bounds the coordinator enforces too (coordinator/core/admission.py): more is cut here, not sent.
MAX_ENTRIES = 64
MAX_KEY = 64
MAX_VALUE = 256
_NVLINK_MAX = 18


def settings(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    found = {k: v for k, v in environ.items() if k.startswith(SETTING_PREFIXES) or k in SETTING_NAMES}
    return {k: found[k][:MAX_VALUE] for k in sorted(found)[:MAX_ENTRIES] if len(k) <= MAX_KEY}


def executor_software() -> tuple[tuple[str, str], ...]:
    """torch, CUDA and NCCL versions, read in the executor (which imports torch anyway)."""
    import torch

    out = {"torch": str(torch.__version__)}
    if torch.version.cuda:
        out["cuda"] = str(torch.version.cuda)
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # built without NCCL
        pass
    return tuple(sorted(out.items()))


def _nvml(nvml, handle) -> tuple[dict[str, str], dict[str, str]]:
    software: dict[str, str] = {}
    topology: dict[str, str] = {}
    for key, read in (("driver", lambda: nvml.nvmlSystemGetDriverVersion()),
                      ("cuda_driver", lambda: nvml.nvmlSystemGetCudaDriverVersion())):
        try:
            v = read()
            software[key] = v.decode() if isinstance(v, bytes) else str(v)
        except Exception:
            pass
    for key, read in (("pcie_gen", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
                      ("pcie_width", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))):
        try:
            topology[key] = str(int(read()))
        except Exception:
            pass
    links = 0
    for link in range(_NVLINK_MAX):
        try:
            links += bool(nvml.nvmlDeviceGetNvLinkState(handle, link))
        except Exception:  # no such link (or no NVLink at all)
            break
    topology["nvlink_links"] = str(links)
    return software, topology


def build(device_type: str, executor_sw=(), telemetry=None, environ=None) -> pb.ConfigFingerprint:
    """The fingerprint a daemon registers with; `telemetry`: its worker.telemetry.Telemetry (NVML)
    on a GPU worker, None on a CPU one."""
    software = {"ringleader": __version__, "python": platform.python_version(), **dict(executor_sw)}
    topology: dict[str, str] = {}
    if telemetry is not None and not getattr(telemetry, "fake", False):
        sw, topology = _nvml(telemetry.nvml, telemetry.handle)
        software.update(sw)
    if device_type == "cpu":
        topology = {"cpu": (platform.processor() or platform.machine() or "cpu")[:MAX_VALUE],
                    "cpus": str(os.cpu_count() or 0)}
    return pb.ConfigFingerprint(software={k: v[:MAX_VALUE] for k, v in software.items()},
                                topology=topology, settings=settings(environ))
