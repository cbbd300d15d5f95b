"""CUDA-graph mode: an op's launches captured once and replayed, so the time is the device's.

An op is captured only after it ran eagerly (the warm-up): NCCL creates its communicator and
torch its lazily built state on the first call, and neither may happen during a capture. Every
op in the vocabulary but barrier is capturable (barrier waits on the host); the spec refuses it.
"""

from __future__ import annotations

import os

import torch

# NCCL's support for a captured op outstanding beside other NCCL work on the same communicator
# (another graph, or an eager call) puts NCCL's own cross-stream event record/wait around every
# captured op. Measured on 2 x H100 (e8f8d6c:bench/graph_probe.py, 20 all_reduces of 8 B per graph):
# 10.1 us per op with it (nccl-tests -G: 6.0), 4.7 us without, the kernels alike (6.7 us each,
# overlapping once nothing is put between them). Without it NCCL needs what ringleader already
# does: one graph replayed at a time on one stream, and the host waits for the replays before
# any eager NCCL call on that communicator (collectives.measure synchronizes after every timed
# loop and after the check's replay). Read by NCCL when a communicator is created; a value the
# worker's environment already sets wins.
COMM_ENV = {"NCCL_GRAPH_MIXING_SUPPORT": "0"}


def set_comm_env(environ=os.environ) -> None:
    """Before any communicator exists (the executor's start): NCCL's settings for graph mode."""
    for key, value in COMM_ENV.items():
        environ.setdefault(key, value)


def capture(run, ops: int, device: torch.device) -> torch.cuda.CUDAGraph:
    """A graph of `ops` calls of `run`, captured on a side stream (torch.cuda.graph's own)."""
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    # thread_local: a capture in global mode is invalidated by any thread's unsafe CUDA call (NCCL's
    # proxy thread, torch's watchdog querying events); nccl-tests captures in this mode too.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(ops):
            run()
    torch.cuda.synchronize(device)
    return graph


class Captured:
    """The timed graph (`ops` launches of the op) and a one-op graph for the data check: the
    check runs what was timed, and an in-place op repeated `ops` times has no closed form."""

    def __init__(self, run, ops: int, device: torch.device) -> None:
        self.ops = ops
        self.timed = capture(run, ops, device)
        self.check = capture(run, 1, device)

    def release(self) -> None:
        """Free the graphs now (NCCL keeps resources for a captured op until its graph goes)."""
        for graph in (self.timed, self.check):
            graph.reset()
