"""Value functions: pass rates p (M,) -> a `GainModel` of M concave curves V_i(B) (spec §4, §8, §9).

All share one interface, ``value_fn.gains(p) -> GainModel``; the optimisers in
`coba_verl.core.solvers` take the result. Strategy ablations differ only in where alpha/beta
come from, which is the allocator's business (`coba_verl.core.allocator`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import special

from coba_verl.core.capability import adaptive_tau
from coba_verl.core.gains import GainModel, GeometricGains, KnapsackGains, QuadraticGains


def saturation(b: np.ndarray, p: np.ndarray, tau: float) -> np.ndarray:
    """eta(B, p) = 1 - exp(-(B / tau) p (1 - p)) (spec §4) [paper]."""
    b = np.asarray(b, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    return -np.expm1(-(b / tau) * p * (1.0 - p))


def beta_density(p: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """BetaPdf(p; alpha, beta) = p^(alpha-1) (1-p)^(beta-1) / B(alpha, beta), for p in (0, 1) (spec §4).

    Written out with log B from `scipy.special.betaln`: the same numbers as scipy.stats.beta.pdf
    (a test checks) at a tenth of the call overhead, which matters for small batches.
    """
    p = np.asarray(p, dtype=np.float64)
    return np.exp((alpha - 1.0) * np.log(p) + (beta - 1.0) * np.log1p(-p) - special.betaln(alpha, beta))


def _check_rates(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"pass rates must be one-dimensional, got shape {p.shape}.")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"pass rate at position {j} is {p[j]}; pass rates must lie in [0, 1].")
    return p


@dataclass
class CobaValue:
    """V(B, p) = eta(B, p) * BetaPdf(p; alpha, beta), with p clipped to [p_low, p_high] (spec §4).

    Args:
        alpha: Beta alpha (the tracker's alpha_t, or a fixed value for the static ablation).
        beta: Beta beta.
        tau: Saturation temperature; ``None`` uses the release's adaptive rule over the batch.
        p_low: Lower clip of p [release: 0.01]; keeps k_i = p (1 - p) / tau > 0.
        p_high: Upper clip of p [release: 0.99].

    After :meth:`gains`, ``last_tau`` holds the tau that was used.
    """

    alpha: float
    beta: float
    tau: float | None = None
    p_low: float = 0.01
    p_high: float = 0.99
    last_tau: float = field(default=float("nan"), init=False)

    def __post_init__(self) -> None:
        if not (self.alpha > 0 and self.beta > 0):
            raise ValueError(f"Beta shape alpha={self.alpha}, beta={self.beta} must be positive.")
        if self.tau is not None and not self.tau > 0:
            raise ValueError(f"tau={self.tau} must be positive or None (adaptive).")

    def clip(self, p: np.ndarray) -> np.ndarray:
        return np.clip(_check_rates(p), self.p_low, self.p_high)

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
        return KnapsackGains(_check_rates(p))


@dataclass
class UniformValue:
    """Stock GRPO: a value maximised at B_i = per_prompt for every prompt (see `QuadraticGains`)."""

    per_prompt: int

    def gains(self, p: np.ndarray) -> GainModel:
        p = _check_rates(p)
        return QuadraticGains(np.full(p.size, float(self.per_prompt)))
