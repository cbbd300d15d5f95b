"""The GPU test fleet: one worker per GPU, or N workers sharing one GPU.

RINGLEADER_TEST_SHARED_GPU=N: N workers share cuda:0, each with its own NCCL_HOSTID, so NCCL
treats them as separate hosts and runs its socket transport: the NCCL paths (rendezvous, warm
groups, failures) run on a machine with one GPU. Their bandwidth is the socket's, not NVLink's.

Daemons start as the README tells operators to, with --state-dir (tests/integration/kept_fleet.py):
a test that kills one restarts it under its id, and the fixture puts the fleet back before each test.
"""

import os

from kept_fleet import KeptWorker, restore, start_kept, start_kept_fleet

from ringleader_app.demo import visible_gpu_count

GPUS = visible_gpu_count()
SHARED = int(os.environ.get("RINGLEADER_TEST_SHARED_GPU", "0")) if GPUS else 0
FLEET = ([("cuda:0", {"NCCL_HOSTID": f"shared-gpu-host-{i}"}) for i in range(SHARED)] if SHARED
         else [(f"cuda:{i}", {}) for i in range(GPUS)])
WORKERS = [KeptWorker(f"g{i}", device, env) for i, (device, env) in enumerate(FLEET)]


def start_fleet(c) -> list[str]:
    """Start a worker for every entry of FLEET on cluster `c`; returns their ids (g0, g1, ...)."""
    return start_kept_fleet(c, WORKERS, timeout=300)


def restart(c, worker_id: str):
    """Start fleet worker `worker_id` again after a test killed it: same device, same state dir."""
    return start_kept(c, next(w for w in WORKERS if w.worker_id == worker_id))


def make_whole(c) -> list[str]:
    """Before each test: the fleet idle and complete, or a prompt failure naming who is missing."""
    return restore(c, WORKERS, timeout=180)
