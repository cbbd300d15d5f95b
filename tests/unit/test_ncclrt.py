"""worker/ncclrt.py off the GPU: where it must step aside (the caller then times torch's call),
and the grouped send/receive plans it falls back on when NCCL has no ncclGather/ncclScatter/
ncclAlltoAll. The launches themselves run in tests/gpu/test_nccl_latency.py (NCCL needs a GPU)."""

import pytest
import torch

from worker import ncclrt
from worker.ops import OpSetup


def test_bind_steps_aside_off_cuda_and_when_disabled(monkeypatch):
    x = torch.zeros(4)
    kw = dict(count=4, dtype="float32", reduce_op="sum", root=0, rank=0, n=2, group=None)
    assert ncclrt.bind("all_reduce", x, x, device=torch.device("cpu"), **kw) is None
    monkeypatch.setenv(ncclrt.ENV, "0")
    assert ncclrt.bind("all_reduce", x, x, device=torch.device("cuda", 0), **kw) is None


def test_cpu_setup_keeps_torchs_call():
    # No process group on CPU here: OpSetup on a CPU device must not reach for a communicator.
    setup = OpSetup("all_reduce", "float32", "sum", 8, rank=0, n=2, root=0, in_place=False,
                    device=torch.device("cpu"))
    assert setup.direct is False


class _T:
    def element_size(self):
        return 4


def test_p2p_plans_follow_nccl_tests():
    t = _T()
    assert ncclrt._p2p_plan("sendrecv", 100, 200, 8, t, rank=0, n=2, root=0) == [
        ("ncclSend", 100, 1), ("ncclRecv", 200, 1)]
    # gather: every rank sends its chunk to the root; the root receives all n, its own included
    assert ncclrt._p2p_plan("gather", 100, 1000, 8, t, rank=0, n=2, root=0) == [
        ("ncclSend", 100, 0), ("ncclRecv", 1000, 0), ("ncclRecv", 1032, 1)]
    assert ncclrt._p2p_plan("gather", 100, None, 8, t, rank=1, n=2, root=0) == [("ncclSend", 100, 0)]
    assert ncclrt._p2p_plan("scatter", 1000, 300, 8, t, rank=0, n=2, root=0) == [
        ("ncclSend", 1000, 0), ("ncclSend", 1032, 1), ("ncclRecv", 300, 0)]
    assert ncclrt._p2p_plan("scatter", None, 300, 8, None, rank=1, n=2, root=0) == [("ncclRecv", 300, 0)]
    plan = ncclrt._p2p_plan("alltoall", 100, 500, 2, t, rank=1, n=3, root=0)
    assert plan == [("ncclSend", 100, 0), ("ncclRecv", 500, 0), ("ncclSend", 108, 1), ("ncclRecv", 508, 1),
                    ("ncclSend", 116, 2), ("ncclRecv", 516, 2)]
    with pytest.raises(ValueError, match="op"):
        ncclrt._p2p_plan("barrier", 0, 0, 1, t, rank=0, n=2, root=0)


def test_graph_comm_env_is_a_default_the_worker_environment_overrides():
    from worker import graphs

    env = {}
    graphs.set_comm_env(env)
    assert env == {"NCCL_GRAPH_MIXING_SUPPORT": "0"}
    env = {"NCCL_GRAPH_MIXING_SUPPORT": "1"}
    graphs.set_comm_env(env)
    assert env["NCCL_GRAPH_MIXING_SUPPORT"] == "1"
