"""The data check's tiled fill and compare (worker/datacheck.py): the values repeat every PERIOD
elements, so fill and count_wrong evaluate the closed form over one period and tile it. These
tests shrink PERIOD (and the block size) so that several periods, several blocks, partial last
periods and periods that start mid-way (a chunk at offset rank * c) all occur in small buffers,
and compare against the per-element formula, which needs no tiling.
"""

from __future__ import annotations

import collections

import pytest
import torch

from ringleader import spec
from worker import datacheck
from worker.ops import torch_dtype


@pytest.fixture
def small_period(monkeypatch):
    monkeypatch.setattr(datacheck, "PERIOD", 37)
    monkeypatch.setattr(datacheck, "_PERIODS", collections.OrderedDict())  # periods of 37 stay here
    monkeypatch.setattr(datacheck, "CHUNK", 100)  # blocks of 2 periods: several blocks per buffer


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint8", "int64"])
@pytest.mark.parametrize("kind", ["copy", "sum", "avg", "prod", "min", "max"])
def test_fill_equals_the_formula_at_every_element(small_period, dtype, kind):
    n, count = 5, 1000  # 27 whole periods and a partial one
    buf = torch.empty(count, dtype=torch_dtype(dtype))
    datacheck.fill(buf, kind=kind, dtype=dtype, src=3, n=n, seed=4)
    want = datacheck.source_values(kind, dtype, 3, torch.arange(count), n, 4)
    assert torch.equal(buf.long(), want)
    assert buf.unique().numel() > 1


def test_values_repeat_every_period_and_not_sooner(small_period):
    v = datacheck.source_values("copy", "float32", 0, torch.arange(3 * 37), 2, 1)
    assert torch.equal(v[:37], v[37:74]) and torch.equal(v[:37], v[74:])
    assert not torch.equal(v[:18], v[18:36])


def _output(op: str, n: int, count: int, rank: int, dtype: str = "float32") -> torch.Tensor:
    """This rank's correct output of a copy op or a sum, from the per-element formula."""
    c = count // n
    j = torch.arange(count if op in ("all_reduce", "all_gather", "alltoall") else c)
    if op == "all_reduce":
        exp = datacheck.reduced_values("sum", dtype, j, n, 1)
    elif op == "reduce_scatter":
        exp = datacheck.reduced_values("sum", dtype, rank * c + j, n, 1)
    elif op == "all_gather":
        exp = datacheck.source_values("copy", dtype, j // c, j % c, n, 1)
    else:  # alltoall
        exp = datacheck.source_values("copy", dtype, j // c, rank * c + j % c, n, 1)
    return exp.to(torch_dtype(dtype))


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "alltoall"])
def test_tiled_check_accepts_the_right_output_and_counts_each_wrong_element(small_period, op):
    n, count, rank = 3, 3 * 250, 2  # chunks of 250: 6 periods and a partial one, from offset 500
    out = _output(op, n, count, rank)
    check = dict(op=op, dtype="float32", reduce_op="sum", rank=rank, world_size=n, root=0, count=count, seed=1)
    assert datacheck.count_wrong(out, **check) == 0
    out[-1] += 1  # in the partial last period
    out[100] = float("nan")  # in a block past the first
    assert datacheck.count_wrong(out, **check) == 2


def test_a_block_moved_by_a_whole_chunk_is_caught(small_period):
    n, count = 4, 4 * 256
    out = _output("all_gather", n, count, rank=0)
    check = dict(op="all_gather", dtype="float32", reduce_op="sum", rank=0, world_size=n, root=0,
                 count=count, seed=1)
    moved = torch.cat([out[256:512], out[256:]])  # rank 1's chunk also where rank 0's belongs
    assert datacheck.count_wrong(moved, **check) > 200


def test_the_formula_runs_over_one_period_not_the_buffer(monkeypatch):
    """What makes a size cheap: the closed form is evaluated on at most PERIOD indices per
    segment, whatever the buffer's size; the rest is copying and comparing."""
    monkeypatch.setattr(datacheck, "PERIOD", 1000)
    monkeypatch.setattr(datacheck, "_PERIODS", collections.OrderedDict())  # none kept from other tests
    seen: list[int] = []
    real = datacheck._hash

    def counting(idx, seed):
        seen.append(idx.numel())
        return real(idx, seed)

    monkeypatch.setattr(datacheck, "_hash", counting)
    count = 1 << 20
    buf = torch.empty(count, dtype=torch.float32)
    datacheck.fill(buf, kind="sum", dtype="float32", src=0, n=1, seed=1)
    assert datacheck.count_wrong(buf, op="all_reduce", dtype="float32", reduce_op="sum", rank=0,
                                 world_size=1, root=0, count=count, seed=1) == 0
    assert seen and max(seen) <= 1000, seen


def test_every_op_has_expected_segments_covering_its_output():
    n, count = 4, 4 * 10
    for op in spec.OPS:
        if op == "barrier":
            continue
        segs = datacheck.expected_segments(op, "sum", "float32", rank=1, world_size=n, root=0, count=count, seed=1)
        covered = sorted((s, s + length) for s, length, _v, _i in segs)
        assert covered[0][0] == 0 and all(a[1] == b[0] for a, b in zip(covered, covered[1:])), (op, covered)


def test_a_warm_repeat_of_a_fill_and_a_check_reuses_their_periods(monkeypatch):
    """A warm job repeats its fills and its check: the formula runs once per distinct period, the
    results stay exact, and the periods kept are bounded."""
    monkeypatch.setattr(datacheck, "_PERIODS", collections.OrderedDict())
    calls: list[int] = []
    real = datacheck._hash
    monkeypatch.setattr(datacheck, "_hash", lambda idx, seed: calls.append(seed) or real(idx, seed))
    check = dict(op="all_reduce", dtype="float32", reduce_op="sum", rank=0, world_size=1, root=0, count=64)
    for _ in range(3):
        buf = torch.empty(64)
        datacheck.fill(buf, kind="sum", dtype="float32", src=0, n=1, seed=1)
        assert datacheck.count_wrong(buf, **check, seed=1) == 0
        buf[5] += 1
        assert datacheck.count_wrong(buf, **check, seed=1) == 1  # a kept period still catches a wrong element
    assert calls == [1, 1]  # the fill's period and the check's, once each
    datacheck.fill(buf, kind="sum", dtype="float32", src=0, n=1, seed=2)
    assert calls == [1, 1, 2]
    for seed in range(3, 3 + 2 * datacheck.PERIODS_KEPT):
        datacheck.fill(buf, kind="sum", dtype="float32", src=0, n=1, seed=seed)
    assert len(datacheck._PERIODS) == datacheck.PERIODS_KEPT
