"""The link check's ping-pong bounded in time (worker/checks/pingpong.py), on a real gloo pair
over loopback: past its box a link stops after MIN_TIMED timed round trips, both ends on the same one (a disagreement would
hang or garble the next transfer); within it, every round trip runs; the byte check's round trip
is left out when asked, by both ends."""

from __future__ import annotations

import datetime
import json
import traceback
import types

import pytest

from ranks import run_ranks

SIZE = 256 << 10
# (iters, warmup, box seconds, byte check): no box; a box already spent when the first round trip
# starts, with a warm-up and without; one round trip; a spent box and no byte check.
CASES = [(12, 3, float("inf"), True), (12, 3, 0.0, True), (12, 0, 0.0, True), (1, 0, 0.0, True), (12, 3, 0.0, False)]


def _rank_main(rank: int, port: int, path: str) -> None:
    payload: dict = {}
    try:
        import torch
        import torch.distributed as dist

        from worker.checks.pingpong import echo, initiate

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=60))
        counter = types.SimpleNamespace(value=0)
        out = []
        for iters, warmup, box, check in CASES:
            if rank == 0:
                out.append(list(initiate(1, SIZE, iters, warmup, torch.device("cpu"), counter, box, check)))
            else:
                out.append(list(echo(0, SIZE, torch.device("cpu"), counter)))
        payload = {"results": out, "ops": counter.value}
        dist.destroy_process_group()
    except BaseException:
        payload["traceback"] = traceback.format_exc()
    with open(path, "w") as f:
        json.dump(payload, f)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> list[dict]:
    return run_ranks(_rank_main, 2, tmp_path_factory.mktemp("pingpong"))


def test_both_ends_stop_on_the_same_round_trip_past_the_box(pair):
    from worker.checks.pingpong import MIN_TIMED

    initiator, echoer = pair[0]["results"], pair[1]["results"]
    # (fastest us, total us, wrong, timed round trips) at each end
    unboxed, boxed, cold, single, unchecked = zip(initiator, echoer)
    assert unboxed[0][3] == unboxed[1][3] == 12
    assert boxed[0][3] == boxed[1][3] == MIN_TIMED  # the box was spent: warm-up cut to one, timed to MIN_TIMED
    assert cold[0][3] == cold[1][3] == MIN_TIMED  # no warm-up
    assert single[0][3] == single[1][3] == 1  # fewer iters than MIN_TIMED: the spec's count stands
    assert unchecked[0][3] == unchecked[1][3] == MIN_TIMED
    for ends in (unboxed, boxed, cold, unchecked):
        assert all(e[0] > 0 and e[1] > 0 and e[2] == 0 for e in ends)
    assert single[0][0] > 0 and single[0][2] == single[1][2] == 0
    # Every round trip is two ops on both ends: 3 + 12 + 1 check, 1 + 2 + 1, 0 + 2 + 1, 0 + 1 + 1,
    # 1 + 2 and no check: the last case would hang or garble if one end still checked.
    assert pair[0]["ops"] == pair[1]["ops"] == 2 * (16 + 1 + MIN_TIMED + 1 + MIN_TIMED + 1 + 2 + 1 + MIN_TIMED)
