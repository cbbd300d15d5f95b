"""Baselines: keys, robust statistics and the regression rule (coordinator/health/baselines.py)."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from coordinator.health import baselines as bl
from coordinator.edge.baseline_metrics import BaselineRegressionsCollector
from coordinator.store.memory import MemoryJobStore
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb

KF = bl.KeyFields(gpu_model="H200", ranks=8, hosts=8)


def row(busbw: float, size: int = 1 << 20, op: str = "all_reduce", mode: str = "eager") -> pb.SizeResult:
    return pb.SizeResult(op=op, dtype="float32", size_bytes=size, busbw_gbps=busbw, mode=mode)


def trained(values) -> pb.BaselineEntry:
    e = bl.new_entry(row(1.0), KF)
    for v in values:
        assert bl.observe(e, v, at=1.0) is None
    return e


def test_key_separates_what_is_not_comparable():
    base = bl.row_key(row(1.0), KF)
    assert base == "H200|all_reduce|float32|2^20|r8|h8|cross|eager|"
    assert bl.row_key(row(1.0, size=(1 << 21) - 1), KF) == base  # same bucket
    assert bl.row_key(row(1.0, size=1 << 21), KF) != base
    assert bl.row_key(row(1.0, mode="graph"), KF) != base
    assert bl.row_key(row(1.0), bl.KeyFields("H200", 8, 1)).endswith("|r8|h1|local|eager|")
    assert bl.row_key(row(1.0), bl.KeyFields("A100", 8, 8)) != base


def test_key_fields_from_job_mixed_models():
    job = pb.Job(workers=[pb.WorkerRef(worker_id="a", host="h1"), pb.WorkerRef(worker_id="b", host="h2")])
    kf = bl.key_fields(job, {"a": "H200", "b": "A100"})
    assert kf == bl.KeyFields(gpu_model="A100+H200", ranks=2, hosts=2)
    with pytest.raises(ValueError, match="ranks"):
        bl.KeyFields("H200", 0, 1)


def test_median_and_mad_resist_an_outlier():
    e = trained([10.0, 10.2, 0.5, 9.8, 10.1, 9.9])  # one far off, fed while learning
    assert e.median_busbw_gbps == pytest.approx(9.95)  # a mean would say 8.4
    assert e.mad_busbw_gbps == pytest.approx(0.15)


def test_no_judgement_while_learning_then_threshold_from_noise_or_floor():
    e = trained([10.0] * 4)
    assert bl.threshold(e) == 0.0
    bl.observe(e, 10.0, at=2.0)
    assert bl.threshold(e) == pytest.approx(7.0)  # MAD 0, five samples: the early 30 % floor
    for _ in range(bl.SETTLED - 5):
        assert bl.observe(e, 10.0, at=3.0) is None
    assert bl.threshold(e) == pytest.approx(9.0)  # settled: the 10 % floor
    # A first pass of tight samples, then a noisier key's: a clean result at 0.74 of the early
    # median is no regression while the window is young (the namespace bed's false alert).
    young = trained([0.094, 0.095, 0.091, 0.094, 0.098])
    assert all(bl.observe(young, 0.0696, at=4.0) is None for _ in range(3))
    noisy = trained([10, 8, 12, 9, 11, 10, 10])  # MAD 1: 4 * 1.4826 sigma = 5.93 below
    assert bl.threshold(noisy) == pytest.approx(10 - 4 * 1.4826)
    wild = trained([10, 2, 18, 5, 15, 10, 10])  # MAD 5: the noise term alone would go below 0
    assert bl.threshold(wild) == pytest.approx(2.5)  # a quarter of the median


def test_one_low_result_is_no_regression_two_of_three_are():
    e = trained([10.0, 10.1, 9.9, 10.0, 10.05])
    assert bl.observe(e, 5.0, at=3.0) is None  # one low: noise, maybe
    assert bl.observe(e, 10.0, at=4.0) is None
    reg = bl.observe(e, 5.0, at=5.0)
    assert reg is not None and reg.low == 2 and reg.judged == 3
    assert reg.ratio == pytest.approx(0.5) and "0.50 of its baseline" in reg.describe()
    assert list(e.samples) == [10.0, 10.1, 9.9, 10.0, 10.05, 10.0]  # low results stay out


def test_low_results_far_apart_do_not_alert():
    e = trained([10.0] * 5)
    for v in (5.0, 10.0, 10.0, 5.0, 10.0, 10.0, 5.0):
        assert bl.observe(e, v, at=1.0) is None


def test_window_keeps_the_last_results():
    e = trained([float(i) for i in range(1, 61)])
    assert len(e.samples) == bl.WINDOW and e.samples[0] == 11.0


def test_clean_noise_raises_no_regression():
    """5 % gaussian noise, 10,000 results: the rule stays silent (measured false-alert rate 0)."""
    rng = random.Random(7)
    e = trained([rng.gauss(100, 5) for _ in range(bl.WINDOW)])
    alerts = sum(bl.observe(e, rng.gauss(100, 5), at=1.0) is not None for _ in range(10_000))
    assert alerts == 0


def test_annotate_sets_ratio_and_key():
    e = trained([10.0] * 5)
    r = bl.annotate(row(8.0), e)
    assert (r.baseline_busbw_gbps, r.baseline_ratio, r.baseline_key) == (10.0, 0.8, e.key)
    empty = bl.annotate(row(8.0), bl.new_entry(row(8.0), KF))
    assert empty.baseline_ratio == 0 and empty.baseline_key
    assert bl.annotate(row(8.0), None).baseline_key == ""


def test_validated_recomputes_key_and_stats_and_names_bad_fields():
    e = trained([10.0] * 5)
    e.key, e.median_busbw_gbps = "forged", 99.0
    out = bl.validated(e)
    assert out.key == bl.row_key(row(1.0), KF) and out.median_busbw_gbps == 10.0
    bad = pb.BaselineEntry()
    bad.CopyFrom(e)
    bad.link = "local"
    with pytest.raises(InvalidSpec, match="link"):
        bl.validated(bad)
    bad.CopyFrom(e)
    bad.op = "a|b"
    with pytest.raises(InvalidSpec, match="op"):
        bl.validated(bad)
    bad.CopyFrom(e)
    bad.samples.append(float("nan"))
    with pytest.raises(InvalidSpec, match="samples"):
        bl.validated(bad)


def test_record_annotates_with_the_baseline_before_the_result_and_counts_regressions():
    store = MemoryJobStore()
    for _ in range(5):
        assert bl.record(store, row(10.0), KF, at=1.0) is None
    first = row(4.0)
    assert bl.record(store, first, KF, at=2.0) is None and first.baseline_ratio == 0.4
    wrong = row(4.0)
    wrong.wrong = 1  # a row with wrong data is shown against its baseline but never judged
    assert bl.record(store, wrong, KF, at=3.0) is None and wrong.baseline_busbw_gbps == 10.0
    reg = bl.record(store, row(4.0), KF, at=4.0)
    assert reg is not None and store.baseline(reg.key).regressions == 1


def test_regressions_metric_from_the_store_with_zero_series_for_every_op():
    store = MemoryJobStore()
    e = bl.new_entry(row(1.0), KF)
    e.regressions = 3
    store.put_baseline(e)
    registry = CollectorRegistry()
    registry.register(BaselineRegressionsCollector(store))
    text = generate_latest(registry).decode()
    assert 'ringleader_baseline_regressions_total{link="cross",op="all_reduce"} 3.0' in text
    assert 'ringleader_baseline_regressions_total{link="local",op="barrier"} 0.0' in text
