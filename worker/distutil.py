"""Small torch.distributed helpers shared by the collective sweep and the other workloads."""


from __future__ import annotations

import math

import torch
import torch.distributed as dist


class NoCounter:
    """Stands in for the supervisor's shared counter when the caller passes none."""

    value = 0


def backend_for(device: torch.device) -> str:
    """The default group's backend for tensors on `device` ("nccl" or "gloo")."""
    name = str(dist.get_backend())
    if ":" in name:  # e.g. "cpu:gloo,cuda:nccl"
        name = dict(part.split(":") for part in name.split(",")).get(device.type, name)
    return name


def sync(device: torch.device) -> None:
    """A barrier that also drains this rank's device work (bookkeeping: not counted as an op).

    An all_reduce on the device rather than dist.barrier, which on NCCL has to guess the device.
    """
    if device.type == "cuda":
        dist.all_reduce(torch.zeros(1, device=device))
        torch.cuda.synchronize(device)
    else:
        dist.barrier()


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    k = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[k - 1]
