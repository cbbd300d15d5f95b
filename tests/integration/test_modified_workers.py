"""Workers whose code was changed: no rank speaks for another.

Each rogue here is a real worker daemon whose own code the test rewrites: it is started with a
PYTHONPATH directory holding a sitecustomize.py that patches worker modules as its daemon and its
executor start (the fault injector's modes are only part of what a modified worker can do). The
coordinator assembles every check's result from each rank's own evidence and each worker's
registration (coordinator/health/assemble.py), so:

- a rank 0 that forges its peers' figures (the outcome it used to assemble, and accusations of
  every peer in its own evidence) names nobody honest, and is itself failed and quarantined on its
  own word (every sender wrong for it alone);
- a rank 0 that corrupts its share of the exact collectives is named by its receivers and
  quarantined, and they stay healthy;
- a worker whose executor reports a GPU model its registration does not is never healthy: it is
  judged under its registered model (failed, when it is also slow and flips a bit) and suspect
  for the claim.

Real coordinator and daemons on loopback (gloo on CPU), three honest workers and one rogue per
check; the rogues' ids sort first, so each is rank 0 of its check.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

HONEST = ["b0", "b1", "b2"]

# A rank 0's JobDone, rewritten on its way out (the daemon's own code): `forge(done, rank, n, kind, ev)`
# replaces whatever the worker would have sent for the check's result, and its own evidence.
REWRITE_DONE = """
    import worker.api as api
    from ringleader.v1 import jobs_pb2 as pb

    honest_to_pb = api.Done.to_pb

    def to_pb(self, rank, executor_restarts):
        done = honest_to_pb(self, rank, executor_restarts)
        # (Also on a worker of a version whose JobDone has no evidence: it reports an assembled outcome.)
        ev = done.WhichOneof("h49e_evidence") if "h49e_evidence" in done.DESCRIPTOR.oneofs_by_name else None
        kind = {"h49e_sdc": "sdc_check", "h49e_gpu": "gpu_check"}.get(ev) or done.WhichOneof("outcome")
        if rank == 0 and kind in ("sdc_check", "gpu_check"):
            n = (len(done.h49e_sdc.wrong_from) if ev == "h49e_sdc" else 0) or len(getattr(done, kind).workers)
            forge(done, rank, n or 4, kind, ev)
        return done

    api.Done.to_pb = to_pb
"""

# What each rogue's sitecustomize.py does to its own worker code.
PATCHES = {
    # Its result frames every peer (flagged, another checksum, named as senders of wrong data, a
    # hundredth of its speed), and its own corruption-check evidence accuses every peer.
    "a-forge": REWRITE_DONE + """
    def forge(done, me, n, kind, ev):
        if kind == "sdc_check":
            if ev:
                done.h49e_sdc.wrong_from[:] = [0 if r == me else 999 for r in range(n)]
            done.sdc_check.CopyFrom(pb.SdcCheckResult(majority_checksum="00", workers=[
                pb.SdcFigures(rank=r, device="cpu", checksum="00" if r == me else "ff", flagged=r != me,
                              named_by=0 if r == me else n - 1, collective_wrong=0 if r == me else 999)
                for r in range(n)]))
        else:
            done.gpu_check.CopyFrom(pb.GpuCheckResult(workers=[
                pb.GpuFigures(rank=r, device="cpu", tflops=1.0 if r == me else 0.01, copy_gbps=1.0,
                              tflops_ratio=1.0 if r == me else 0.01, copy_ratio=1.0, flagged=r != me)
                for r in range(n)]))
    """,
    # Corrupts its share of the exact collectives, and clears itself in the result it reports:
    # nobody named, its receivers' wrong data theirs.
    "a-share": REWRITE_DONE + """
    import worker.checks.sdc_check as sdc

    honest = sdc.exact_collectives

    def exact_collectives(rank, n, device, wrong_result=False, corrupt_share=False):
        return honest(rank, n, device, wrong_result, corrupt_share=True)

    sdc.exact_collectives = exact_collectives

    def forge(done, me, n, kind, ev):
        if done.HasField("sdc_check"):
            for w in done.sdc_check.workers:
                w.flagged, w.named_by = w.rank != me, 0
                w.wrong_from[:] = [0] * len(w.wrong_from)
    """,
    # Its executor says its device is a model no peer has (its registration is left as it is).
    "a-model": """
    import dataclasses
    import worker.checks.peers as peers

    honest_me = peers.me

    def me(device):
        return dataclasses.replace(honest_me(device), model="NVIDIA H999 (no peers)")

    peers.me = me
    """,
}
# The model liar also runs 8x slower and flips a bit (the fault injector), as a failing GPU would.
FAULTS = {"a-model": "slow_compute=8,flip_bit=1"}


def _patched_env(tmp: Path, wid: str) -> dict:
    d = tmp / f"site-{wid}"
    d.mkdir()
    (d / "sitecustomize.py").write_text(textwrap.dedent(PATCHES[wid]))
    env = {"PYTHONPATH": os.pathsep.join([str(d), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if wid in FAULTS:
        env.update(RINGLEADER_FAULTS=FAULTS[wid], RINGLEADER_FAULTS_ALLOWED="tests")
    return env


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    from cluster import Cluster

    tmp = tmp_path_factory.mktemp("modified")
    # Quarantine by the verdict alone: the circuit breaker (a share of a model's workers) would
    # otherwise hold a rogue of 4 workers in service and hide what the verdict was.
    c = Cluster(tmp)
    try:
        c.start_coordinator(extra=["--quarantine-max-share", "1"])
        for wid in HONEST:
            c.start_worker(wid)
        for wid in PATCHES:
            c.start_worker(wid, env=_patched_env(tmp, wid))
        c.wait_idle(HONEST + list(PATCHES))
        yield c
    finally:
        c.close()


def _check(c, rogue: str, kind: str) -> tuple[pb.Job, dict[str, pb.WorkerHealth]]:
    answer = c.client.run_check(pb.RunCheckRequest(worker_ids=HONEST + [rogue], kinds=[kind], wait=True,
                                                   timeout_s=180))
    (job,) = answer.jobs
    assert job.state == pb.SUCCEEDED, job.reason
    assert {w.worker_id: w.rank for w in job.workers}[rogue] == 0  # the rank that used to assemble
    health = {w.worker_id: w.health for w in answer.workers}
    return job, health


@pytest.mark.parametrize("kind", ["sdc_check", "gpu_check"])
def test_a_forging_rank_0_names_nobody_honest(bed, kind):
    job, health = _check(bed, "a-forge", kind)
    for wid in HONEST:
        assert health[wid].verdict == pb.HEALTHY, (wid, health[wid])
    result = getattr(job, kind)
    assert all(not w.flagged for w in result.workers if w.worker_id in HONEST), result  # not its forgery
    if kind == "sdc_check":
        # It says every peer sent it wrong data; each peer's other receivers say theirs came intact:
        # on its own word, the fault is its own (its receive path, or its report). Failed, quarantined.
        assert health["a-forge"].verdict == pb.UNHEALTHY, health["a-forge"]
        assert "received wrong data from all 3 senders" in health["a-forge"].figure
        assert all(w.named_by == 1 for w in result.workers if w.worker_id in HONEST), result
        listed = {w.worker_id: w.state for w in bed.client.workers()}
        assert listed["a-forge"] == pb.QUARANTINED
        bed.client.cordon("a-forge", on=False, force=True)  # back for the next check's turn


def test_a_corrupting_sender_at_rank_0_is_named_and_quarantined_and_its_receivers_are_healthy(bed):
    job, health = _check(bed, "a-share", "sdc_check")
    figures = {w.worker_id: w for w in job.sdc_check.workers}
    assert figures["a-share"].named_by == 3 and figures["a-share"].flagged
    assert health["a-share"].verdict == pb.UNHEALTHY and "3 of 3 receivers" in health["a-share"].figure
    for wid in HONEST:
        assert figures[wid].wrong_from[0] > 0 and not figures[wid].flagged
        assert health[wid].verdict == pb.HEALTHY, (wid, health[wid])
    listed = {w.worker_id: w.state for w in bed.client.workers()}
    assert listed["a-share"] == pb.QUARANTINED


@pytest.mark.parametrize("kind", ["gpu_check", "sdc_check"])
def test_a_worker_claiming_another_gpu_model_is_judged_under_its_registration(bed, kind):
    job, health = _check(bed, "a-model", kind)
    result = getattr(job, kind)
    registered = {w.worker_id: w for w in result.workers}
    # Compared with its registered peers, not under the model its executor named...
    assert registered["a-model"].device == registered["b0"].device != "NVIDIA H999 (no peers)"
    assert registered["a-model"].flagged, result  # 8x slower / a flipped bit: below its peers
    assert health["a-model"].verdict == pb.UNHEALTHY, health["a-model"]
    # ...and the claim itself is on record.
    (gap,) = result.h49e_gaps
    assert "H999" in gap.reason and registered["a-model"].rank == gap.rank
    for wid in HONEST:
        assert health[wid].verdict == pb.HEALTHY, (wid, health[wid])
