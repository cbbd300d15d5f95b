"""The three check runners (worker/checks/) on one real gloo group of 4 CPU ranks.

Rank 2 runs with the fault injector's slowed compute and a flipped bit, rank 3 with a wrong
collective result after the op (its own receive path: it is a receiver of wrong data, not a
sender, and is not flagged); ranks 0 and 1 are clean. One spawned group runs the three checks in
turn (process start is slow); the tests then read what every rank returned.
"""

from __future__ import annotations

import datetime
import json
import os
import traceback
import types

import pytest

from ranks import run_ranks
from ringleader import jobspec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

N = 4
FAULTS = {2: "slow_compute=8,flip_bit=1", 3: "wrong_result=1"}
SPECS = {
    "link_matrix": pb.LinkMatrixSpec(size_bytes=64 << 10, iters=3, warmup=1),
    "gpu_check": pb.GpuCheckSpec(matmul_n=256, iters=7),  # the CPU copy default: in the core's cache
    "sdc_check": pb.SdcCheckSpec(seed=5, rounds=3),
}
RESULT_TYPES = {"link_matrix": pb.LinkMatrixResult, "gpu_check": pb.GpuCheckResult, "sdc_check": pb.SdcCheckResult}
EVIDENCE_TYPES = {"link_matrix": wpb.H49eLinkEvidence, "gpu_check": wpb.H49eGpuEvidence,
                  "sdc_check": wpb.H49eSdcEvidence}


def _rank_main(rank: int, port: int, path: str) -> None:
    payload: dict = {}
    try:
        import torch
        import torch.distributed as dist

        from worker.checks import gpu_check, link_matrix, sdc_check
        from worker.kinds import RunContext

        if rank in FAULTS:
            os.environ.update(RINGLEADER_FAULTS=FAULTS[rank], RINGLEADER_FAULTS_ALLOWED="tests")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=N,
                                timeout=datetime.timedelta(seconds=60))
        runners = {"link_matrix": link_matrix.run_link_matrix, "gpu_check": gpu_check.run_gpu_check,
                   "sdc_check": sdc_check.run_sdc_check}
        sent: list = []
        counter = types.SimpleNamespace(value=0)
        for kind, kind_spec in SPECS.items():
            spec = pb.JobSpec(world_size=N)
            getattr(spec, kind).CopyFrom(kind_spec)
            job = jobspec.normalize(spec)
            ctx = RunContext(f"job-{kind}", rank, torch.device("cpu"), counter, sent.append)
            outcome = runners[kind](job, ctx)
            payload[kind] = outcome.message.SerializeToString().hex()
            payload[f"{kind}_evidence"] = outcome.evidence.SerializeToString().hex()
        payload["ops"] = counter.value
        payload["progress"] = len(sent)
        dist.destroy_process_group()
    except BaseException:
        payload["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(payload, f)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return run_ranks(_rank_main, N, tmp_path_factory.mktemp("checks"), timeout=240)


def _result(ranks, kind):
    """The outcome, checked to be the same on every rank (rank 0's is the one reported)."""
    raw = {p[kind] for p in ranks}
    assert len(raw) == 1, f"{kind}: ranks disagree"
    return RESULT_TYPES[kind].FromString(bytes.fromhex(raw.pop()))


def test_link_matrix_measures_every_pair_once_in_rounds_of_disjoint_pairs(ranks):
    r = _result(ranks, "link_matrix")
    assert r.rounds == N - 1 and r.size_bytes == 64 << 10
    assert sorted((x.a, x.b) for x in r.links) == [(a, b) for a in range(N) for b in range(a + 1, N)]
    for k in range(N - 1):
        in_round = [x for x in r.links if x.round == k]
        assert len(in_round) == N // 2
        assert len({x.a for x in in_round} | {x.b for x in in_round}) == N  # disjoint
    for x in r.links:
        assert x.wrong == 0 and x.gbps > 0 and x.latency_us > 0 and x.size_bytes == 64 << 10
        assert x.gbps == pytest.approx((64 << 10) / x.latency_us / 1e3, rel=1e-6)
        assert x.gbps == min(x.gbps_a, x.gbps_b) and x.gbps_a > 0 and x.gbps_b > 0  # both ends timed it
        assert r.matrix[x.a].gbps[x.b] == r.matrix[x.b].gbps[x.a] == x.gbps
    assert [r.matrix[i].gbps[i] for i in range(N)] == [-1.0] * N
    assert r.median_cross_host_gbps == 0  # one host
    assert r.size_reason.startswith("given")
    # The reference is the median of the links whose two ends agree on how long they took. On a
    # loaded machine (two test processes on two cores) every link's ends disagreed once: then
    # there is no reference, no ratio, and no link flagged on its figure.
    if any(not x.ends_disagree for x in r.links):
        assert 0 < r.flag_same_host_gbps < r.median_same_host_gbps
        for x in r.links:
            assert x.ratio == pytest.approx(x.gbps / r.median_same_host_gbps, rel=1e-6)
    else:
        assert r.median_same_host_gbps == r.flag_same_host_gbps == 0
        assert all(x.ratio == 0 and not x.flagged for x in r.links)
    assert all(p["ops"] > 0 for p in ranks)


def test_gpu_check_names_the_slowed_compute_only(ranks):
    r = _result(ranks, "gpu_check")
    assert (r.matmul_n, r.dtype, r.copy_bytes) == (256, "float32", 512 << 10)  # the CPU dtype and copy defaults
    assert [w.rank for w in r.workers] == list(range(N))
    assert [w.flagged for w in r.workers] == [False, False, True, False], r
    assert r.series == 2  # rank 2 read low, so every rank measured again: low in the best of both
    slow = r.workers[2]
    assert slow.tflops < slow.flag_tflops  # (its copy is not slowed, but a busy machine may slow it too)
    assert all(w.tflops > 0 and w.copy_gbps > 0 and w.device and w.wrong == 0 for w in r.workers)
    # One machine: the four ranks took turns, each turn timed by every rank's clock. The peers'
    # median clock and a rank's own claim differ by scheduling noise on a busy 2-core machine
    # (the claim ran past the median once in a full-suite run): what matters is no honest refusal.
    assert all(w.witnessed_s > 0.5 * w.claimed_s > 0 and not w.refused for w in r.workers)


def test_sdc_check_names_the_flipped_bit_and_the_wrong_collective(ranks):
    r = _result(ranks, "sdc_check")
    digests = [w.checksum for w in r.workers]
    assert digests[0] == digests[1] == digests[3] == r.majority_checksum != digests[2]
    assert [w.collective_wrong for w in r.workers] == [0, 0, 0, 1]
    assert [w.reduce_wrong for w in r.workers] == [0, 0, 0, 1]
    assert [list(w.wrong_from) for w in r.workers] == [[0] * N] * N and [w.named_by for w in r.workers] == [0] * N
    assert [w.flagged for w in r.workers] == [False, False, True, False]



@pytest.mark.parametrize("kind", list(SPECS))
def test_the_coordinator_assembles_the_ranks_result_from_each_ranks_own_evidence(ranks, kind):
    """What the coordinator builds from every rank's own evidence (and the workers' registration:
    here the same host and CPU model the executors saw) is the result the ranks judged alike
    while they measured, link passes included: nothing in it needs one rank's word on another."""
    import platform
    import socket

    from coordinator.health import assemble

    spec = pb.JobSpec(world_size=N)
    getattr(spec, kind).CopyFrom(SPECS[kind])
    spec = jobspec.normalize(spec).spec
    evidence = {r: EVIDENCE_TYPES[kind].FromString(bytes.fromhex(p[f"{kind}_evidence"])) for r, p in enumerate(ranks)}
    refs = [pb.WorkerRef(rank=r, host=socket.gethostname(), device="cpu:0") for r in range(N)]
    model = platform.processor() or platform.machine() or "cpu"  # what a CPU worker registers (executor.probe)
    got = getattr(assemble, kind)(spec, refs, [model] * N, evidence)
    assert got == _result(ranks, kind)
    assert not got.h49e_gaps
