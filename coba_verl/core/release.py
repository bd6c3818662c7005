"""The authors' release wrapper around Algorithm 1: buckets, a band share, and a fallback (spec §6).

Buckets on the raw pass rate p (unseen prompts enter with 0.5, so they fall in the band):
very hard p < 0.05, very easy p > 0.99, band otherwise. With S = total - M * low:

* r = 0.8 if the band holds more than half the batch, else 0.6 + 0.2 * 2 * band_fraction;
* the band alone enters the optimiser with floor(r * S) extra rollouts (fewer if its caps bind),
  tau computed over the band's clipped p;
* the rest goes to the very hard prompts, then the band, then the very easy ones, each in
  proportion to 1 - p, remainders one by one in batch order, never past ``up``.

Differences from the released code, on purpose: the proportional split uses the amount at the
start of the bucket (the release divides a shrinking remainder, which favours the first prompts);
what a cap refuses inside a bucket is split again by 1 - p over the bucket's prompts with room
(the release hands it out once, evenly, then passes the rest to the next bucket); the weight is
exactly 1 - p, so p = 1 gets no proportional share (the release clips p to 1 - 1e-6 first); an
infeasible budget raises instead of falling back to uniform or dropping rollouts.
"""

from __future__ import annotations

import numpy as np

from coba_verl.core.solvers import check_budget, solve
from coba_verl.core.spread import spread_weighted
from coba_verl.core.values import CobaValue

VERY_HARD_BELOW = 0.05
VERY_EASY_ABOVE = 0.99
BAND_SHARE_MAX = 0.8
BAND_SHARE_MIN = 0.6


def band_share(band_fraction: float) -> float:
    """r = 0.8 if band_fraction > 0.5 else 0.6 + 0.2 * 2 * band_fraction (spec §6) [release]."""
    if band_fraction > 0.5:
        return BAND_SHARE_MAX
    return BAND_SHARE_MIN + (BAND_SHARE_MAX - BAND_SHARE_MIN) * 2.0 * band_fraction


def allocate_release(
    p: np.ndarray, total: int, low: int, up: int, value: CobaValue, solver: str = "fast"
) -> tuple[np.ndarray, dict[str, float]]:
    """Budgets (M,) by the release's buckets + band optimiser + fallback; also bucket sizes as metrics.

    Args:
        p: (M,) pass rates in [0, 1], unseen prompts already set to 0.5.
        total, low, up: the budget and the bounds, as for the solvers.
        value: the CoBA value (alpha, beta, tau rule, clip) used for the band.
        solver: optimiser for the band (``fast``, ``heap`` or ``dp``), all exact.
    """
    p = np.asarray(p, dtype=np.float64)
    check_budget(p.size, total, low, up)
    m = p.size
    budgets = np.full(m, low, dtype=np.int64)
    surplus = int(total) - m * low
    hard = np.flatnonzero(p < VERY_HARD_BELOW)
    easy = np.flatnonzero(p > VERY_EASY_ABOVE)
    band = np.flatnonzero((p >= VERY_HARD_BELOW) & (p <= VERY_EASY_ABOVE))
    r = band_share(band.size / m)
    info = {
        "release/hard": float(hard.size),
        "release/band": float(band.size),
        "release/easy": float(easy.size),
        "release/band_share": r,
    }
    if band.size and surplus:
        extra = min(int(surplus * r), band.size * (up - low))  # caps refuse the rest
        gains = value.gains(p[band])  # tau over the band only [release]
        # 0 <= extra <= band.size * (up - low): feasible by construction
        budgets[band] = solve(gains, band.size * low + extra, low, up, solver=solver)
        surplus -= extra
    for bucket in (hard, band, easy):
        if surplus == 0:
            break
        surplus = spread_weighted(budgets, bucket, 1.0 - p[bucket], surplus, up)
    assert surplus == 0, "a feasible budget always fits under the caps"
    return budgets, info
