"""Stragglers: who reaches a job's ops last (worker/stragglers.py), from the tally alone and on a
real gloo group where one rank runs with the fault injector's delay before each timed op."""

from __future__ import annotations

import datetime
import json
import os
import traceback

import pytest

from ranks import run_ranks
from worker.stragglers import StragglerTally


def test_the_rank_that_waits_least_arrived_last():
    t = StragglerTally()
    # Rank 2 arrives 5 ms late at every op: the others wait for it inside the op.
    t.add("all_reduce", [[5100.0] * 10, [5050.0] * 10, [100.0] * 10])
    s = t.summary()
    assert s["straggler"] == 2 and s["straggler_lag_us"] == pytest.approx(5000.0)
    assert [r["last_share"] for r in s["ranks"]] == [0.0, 0.0, 1.0]
    assert s["ranks"][0]["mean_lag_us"] == 0.0


def test_no_straggler_when_last_place_rotates_or_lags_are_small():
    rotating = StragglerTally()
    rotating.add("all_reduce", [[900.0, 100.0], [100.0, 900.0]])
    assert rotating.summary()["straggler"] == -1
    small = StragglerTally()  # always last, but by 1 us of a 1 ms op: not worth a name
    small.add("all_gather", [[1000.0] * 8, [999.0] * 8])
    assert small.summary()["straggler"] == -1


def test_rooted_ops_and_empty_jobs_name_nobody():
    t = StragglerTally()
    t.add("broadcast", [[5000.0] * 4, [10.0] * 4])
    assert t.summary() == {"ranks": [], "straggler": -1, "straggler_lag_us": 0.0}
    t.add("all_reduce", [[1.0], [2.0]])
    with pytest.raises(ValueError, match="times_by_rank"):
        t.add("all_reduce", [[1.0], [2.0], [3.0]])


def _rank_main(rank: int, port: int, path: str, n: int, slow: int) -> None:
    import torch
    import torch.distributed as dist

    from worker import collectives

    if rank == slow:  # what a test harness puts in one worker daemon's environment
        os.environ.update(RINGLEADER_FAULTS="delay_op_ms=20", RINGLEADER_FAULTS_ALLOWED="tests")
    out: dict = {}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                                timeout=datetime.timedelta(seconds=60))
        tally = StragglerTally()
        for size in (1024, 65536):
            local = collectives.measure("all_reduce", "float32", "sum", size, iters=10, warmup=1, in_place=False,
                                        root=0, device=torch.device("cpu"))
            collectives.summarize(local, op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=size,
                                  root=0, in_place=False, device="cpu", tally=tally)
        out["summary"] = tally.summary()
        dist.destroy_process_group()
    except BaseException:
        out["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(out, f)


def test_fault_injected_straggler_named_with_its_lag_on_gloo(tmp_path):
    n, slow = 3, 1
    outs = run_ranks(_rank_main, n, tmp_path, args=(n, slow))
    s = outs[0]["summary"]
    assert all(o["summary"]["straggler"] == s["straggler"] for o in outs)  # every rank agrees
    print(f"straggler rank {s['straggler']}, lag {s['straggler_lag_us'] / 1e3:.1f} ms; ranks {s['ranks']}")
    assert s["straggler"] == slow, s
    assert 15_000 < s["straggler_lag_us"] < 60_000, s  # the injected 20 ms, give or take scheduling
