"""Noise-aware flags for the checks: a figure is low when it falls below the comparable figures'
median by more than their noise, with a floor (the rule coordinator/health/baselines.py applies
to results over time, here applied across the peers of one check).

    bound = median - max(K_MAD * sigma, FLOOR * median)

sigma = 1.4826 x MAD estimates a normal sigma from the comparable figures themselves, so a noisy
bed (CPU workers sharing two cores) widens the band and a quiet fleet of GPUs narrows it. With four
figures or more, sigma is at most what the lower quartile's distance from the median says:
figures faster than the median never widen the band. The floor keeps near-identical figures from
flagging a 5 % dip (and is all there is with two figures). The bound never goes below CEILING x
median, so a figure at a small share of its peers is flagged however noisy they are.
"""

from __future__ import annotations

import statistics

K_MAD = 4.0
MAD_SIGMA = 1.4826
# A normal distribution's lower quartile lies this many sigmas below its median.
Q1_SIGMA = 0.6745
# The band is at least this share of the median: a link at half its peers' throughput (a 2x
# slower link) is below it whenever the peers' noise is small enough to tell.
FLOOR = 0.3
# ...and a figure below this share of the median is flagged whatever the noise.
CEILING = 0.25


def bound(values: list[float], floor: float = FLOOR) -> float:
    """The lowest figure that is not flagged, from the comparable figures (0 when none); `floor`:
    the band's least share of the median (a noisier kind of device asks for a wider one)."""
    if not values:
        return 0.0
    med = float(statistics.median(values))
    # Two figures have no noise to speak of: their MAD is half their difference, so an outlier
    # would always sit inside its own band. Below three, the floor alone.
    mad = float(statistics.median(abs(v - med) for v in values)) if len(values) >= 3 else 0.0
    sigma = MAD_SIGMA * mad
    if len(values) >= 4:
        # Only the spread below the median can hide a slow figure. Figures above it are ranks
        # that ran at their best, and on the 2-core namespace bed those came in a second mode
        # (three ranks of eight at 2.0 GB/s, the rest at 1.3-1.45): the MAD then widened the band
        # to 0.25 of the median, and a host whose every link read 0.33 of it was not flagged.
        q1 = statistics.quantiles(values, n=4, method="inclusive")[0]
        sigma = min(sigma, (med - q1) / Q1_SIGMA)
    return max(med - max(K_MAD * sigma, floor * med), CEILING * med)


def set_by_noise(median: float, low: float) -> bool:
    """Whether `low` (bound's answer for figures of this median) is below the floor's bound: the
    comparable figures were too noisy for the floor to decide (a figure at half its peers may pass)."""
    return median > 0 and low < (1 - FLOOR) * median * (1 - 1e-9)  # float slack: the floor alone is not noise


def describe(median: float, low: float) -> str:
    """The rule, for a verdict's `expected`."""
    share = low / median if median > 0 else 0.0
    return (f">= {low:.4g} ({share:.2f} of the median {median:.4g}: median - max({K_MAD:g} sigma (1.4826 MAD, "
            f"at most the lower quartile's), {FLOOR:g} x median), at least {CEILING:g} x median)")


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0
