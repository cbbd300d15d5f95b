"""A worker daemon's default id and the local devices it may run on."""

from __future__ import annotations

import os
import socket


def default_worker_id(device: str, host: str = "") -> str:
    """`host`: the name it registers with (--host-name; in Kubernetes the node's, so a replaced pod
    keeps its ids), else the machine's."""
    host = host or socket.gethostname()
    # One daemon per GPU makes cuda ids stable; CPU daemons may share a host, so add the pid.
    return f"{host}-{device.replace(':', '')}" + ("" if device.startswith("cuda") else f"-{os.getpid()}")


def local_cuda_devices() -> list[str]:
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
