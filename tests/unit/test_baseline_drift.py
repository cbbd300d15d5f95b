"""A step down inside a key's per-result band is raised, not learnt (coordinator/health/baselines.py's
drift detector beside the per-result rule). Figures: keys with noise of 10 % and 20 % of their
median (the loaded namespace bed's sweeps read 14 % apart), seeded, so every run is the same."""

from __future__ import annotations

import random

from coordinator.health import baselines
from ringleader.v1 import jobs_pb2 as pb


def _settled(rng: random.Random, sigma: float) -> pb.BaselineEntry:
    e = pb.BaselineEntry(key="link|test", op="link_matrix")
    for t in range(60):
        baselines.observe(e, max(0.01, rng.gauss(1.0, sigma)), float(t))
    return e


def test_a_step_inside_the_band_is_raised_within_three_results_and_not_learnt():
    # A step to 0.6 of the median: inside the per-result band of a key this noisy, which alone
    # raised it within 3 results for 56 of these 100 keys (measured with the detector off).
    raised = kept = 0
    for seed in range(100):
        rng = random.Random(seed)
        e = _settled(rng, 0.10)
        before = e.median_busbw_gbps
        found = [r for t in range(60, 63) if (r := baselines.observe(e, 0.6 * before * rng.uniform(0.95, 1.05), t))]
        raised += bool(found)
        kept += abs(e.median_busbw_gbps - before) <= 0.10 * before
    assert kept == 100
    assert raised >= 80, raised  # 83 measured


def test_clean_noisy_keys_raise_almost_nothing():
    # 24,000 clean results: 2 false regressions measured, both the same seeded run of three draws
    # 1.8-2 sigmas low (once per noise level); 0 with the detector off. The detector's price.
    false = 0
    for sigma in (0.10, 0.20):
        for seed in range(40):
            e, rng = pb.BaselineEntry(key="k", op="x"), random.Random(1000 + seed)
            false += sum(1 for t in range(300) if baselines.observe(e, max(0.01, rng.gauss(1.0, sigma)), float(t)))
    assert false <= 2, false
