"""Value functions: pass rates p (M,) -> a `GainModel` of M concave curves V_i(B) (spec §4, §9).

Both share one interface, ``value_fn.gains(p) -> GainModel``; the optimisers in
`coba_verl.core.solvers` take the result. Strategy ablations differ only in where alpha/beta
come from, which is the allocator's business (`coba_verl.core.allocator`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coba_verl.core.capability import adaptive_tau
from coba_verl.core.config import CobaConfig, check_shape, invalid_pass_rates
from coba_verl.core.gains import GeometricGains, KnapsackGains
from coba_verl.refusal import CobaRefusal


def saturation(b: np.ndarray, p: np.ndarray, tau: float) -> np.ndarray:
    """eta(B, p) = 1 - exp(-(B / tau) p (1 - p)) (spec §4) [paper]."""
    b = np.asarray(b, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    return -np.expm1(-(b / tau) * p * (1.0 - p))


def beta_density(p: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """BetaPdf(p; alpha, beta) = p^(alpha-1) (1-p)^(beta-1) / B(alpha, beta), for p in (0, 1) (spec §4).

    Written out with log B(alpha, beta) = lgamma(alpha) + lgamma(beta) - lgamma(alpha + beta) from
    `math.lgamma`: the same numbers as scipy.stats.beta.pdf (a test checks), so that
    ``import coba_verl``, run in every veRL process, does not import scipy (README).
    """
    p = np.asarray(p, dtype=np.float64)
    log_b = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    return np.exp((alpha - 1.0) * np.log(p) + (beta - 1.0) * np.log1p(-p) - log_b)


def check_pass_rates(p: Any, name: str = "p", *, unseen: bool = False) -> np.ndarray:
    """(M,) float64 pass rates in [0, 1]; with ``unseen``, NaN too (a prompt without history).

    >>> check_pass_rates([0.5, 1.5], "pass_rates")
    Traceback (most recent call last):
    ...
    coba_verl.refusal.CobaRefusal: pass rate 1.5 is outside [0, 1] (pass_rates[1]).
    """
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {p.shape}.")
    bad = invalid_pass_rates(p, unseen=unseen)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise CobaRefusal(f"pass rate {p[j]} is outside [0, 1] ({name}[{j}]).")
    return p


@dataclass
class CobaValue:
    """V(B, p) = eta(B, p) * BetaPdf(p; alpha, beta), with p clipped to [p_low, p_high] (spec §4).

    Args:
        alpha: Beta alpha (the tracker's alpha_t, or a fixed value for the static ablation); >= 1.
        beta: Beta beta; >= 1.
        tau: Saturation temperature; ``None`` uses the release's adaptive rule over the batch.
        p_low: Lower clip of p [release: 0.01]; keeps k_i = p (1 - p) / tau > 0.
        p_high: Upper clip of p [release: 0.99].

    After :meth:`gains`, ``last_tau`` holds the tau that was used.
    """

    alpha: float
    beta: float
    tau: float | None = None
    p_low: float = CobaConfig.p_clip_low
    p_high: float = CobaConfig.p_clip_high
    last_tau: float = field(default=float("nan"), init=False)

    def __post_init__(self) -> None:
        self.alpha, self.beta = check_shape(self.alpha, self.beta)
        if self.tau is not None and not self.tau > 0:
            raise ValueError(f"tau={self.tau} must be positive or None (adaptive).")

    def clip(self, p: np.ndarray) -> np.ndarray:
        return np.clip(check_pass_rates(p), self.p_low, self.p_high)

    def gains(self, p: np.ndarray) -> GeometricGains:
        pc = self.clip(p)  # (M,) float64 in [p_low, p_high]
        tau = adaptive_tau(pc) if self.tau is None else float(self.tau)
        self.last_tau = tau
        c = beta_density(pc, self.alpha, self.beta)  # V at saturation
        k = pc * (1.0 - pc) / tau  # eta(B) = 1 - exp(-k B)
        return GeometricGains(c, k)


@dataclass
class KnapsackValue:
    """Knapsack-RL: V(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2, unclipped p (spec §9)."""

    def gains(self, p: np.ndarray) -> KnapsackGains:
        return KnapsackGains(check_pass_rates(p))


def no_spread_probability(p: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """q(p, B) = p^B + (1 - p)^B: the chance that B rollouts of pass rate p all score alike.

    >>> no_spread_probability(np.array([0.0, 0.5, 0.1]), np.array([4, 2, 16])).round(3).tolist()
    [1.0, 0.5, 0.185]
    """
    p = np.asarray(p, dtype=np.float64)
    b = np.asarray(budgets, dtype=np.float64)
    return p**b + (1.0 - p) ** b


def expected_no_spread(a: np.ndarray, b: np.ndarray, budget: int) -> np.ndarray:
    """E[p^B + (1 - p)^B] for p ~ Beta(a, b): prod_{j<B} (a + j)/(a + b + j) + prod_{j<B} (b + j)/(a + b + j).

    >>> float(expected_no_spread(np.array([1.0]), np.array([1.0]), 2)[0])  # Uniform(0, 1): 2 x 1/3
    0.6666666666666666
    """
    a = np.asarray(a, dtype=np.float64)[..., None]
    b = np.asarray(b, dtype=np.float64)[..., None]
    j = np.arange(int(budget), dtype=np.float64)
    return np.prod((a + j) / (a + b + j), axis=-1) + np.prod((b + j) / (a + b + j), axis=-1)
