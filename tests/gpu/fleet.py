"""The GPU test fleet: one worker per GPU, or N workers sharing one GPU.

RINGLEADER_TEST_SHARED_GPU=N: N workers share cuda:0, each with its own NCCL_HOSTID, so NCCL
treats them as separate hosts and runs its socket transport: the NCCL paths (rendezvous, warm
groups, failures) run on a machine with one GPU. Their bandwidth is the socket's, not NVLink's.
"""

import os

from ringleader.app.demo import visible_gpu_count

GPUS = visible_gpu_count()
SHARED = int(os.environ.get("RINGLEADER_TEST_SHARED_GPU", "0")) if GPUS else 0
FLEET = ([("cuda:0", {"NCCL_HOSTID": f"shared-gpu-host-{i}"}) for i in range(SHARED)] if SHARED
         else [(f"cuda:{i}", {}) for i in range(GPUS)])


def start_fleet(c) -> list[str]:
    """Start a worker for every entry of FLEET on cluster `c`; returns their ids (g0, g1, ...)."""
    ids = [f"g{i}" for i in range(len(FLEET))]
    for wid, (device, env) in zip(ids, FLEET):
        c.start_worker(wid, device=device, env=env)
    c.wait_idle(ids, timeout=300)
    return ids
