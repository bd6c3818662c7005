"""Per-prompt value curves V_i(B) and their marginal gains dV_i(B) = V_i(B + 1) - V_i(B).

Every optimiser works on a `GainModel`: M concave curves (gains non-increasing in B), evaluated
vectorised. The heap also needs one gain at a time (`gain_one`), computed from the same
per-prompt constants in plain Python so that it never calls numpy per pop. The two can differ in
the last bit (``math.exp`` and ``np.exp`` round differently), so two gains that tie to within
rounding may be ordered differently by the heap and by the vectorised solvers: same objective,
possibly another of the tied optima (see `coba_verl.core.solvers`).

Notation: M prompts; b is an (M,) int array of per-prompt budgets unless stated otherwise.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from coba_verl.core.config import invalid_pass_rates


class GainModel(ABC):
    """M separable concave value curves."""

    size: int
    #: True when `count_at_least` is closed form (cheap for any M); False for the generic bisection.
    closed_form_counts: bool = False

    def value(self, b: np.ndarray) -> np.ndarray:
        """(M,) V_i(b_i)."""
        return self.value_at(np.arange(self.size), b)

    @abstractmethod
    def value_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Values of prompts ``idx`` (K,) at budgets ``b`` (K,)."""

    def gain(self, b: np.ndarray) -> np.ndarray:
        """(M,) V_i(b_i + 1) - V_i(b_i)."""
        return self.gain_at(np.arange(self.size), b)

    @abstractmethod
    def gain_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Gains of prompts ``idx`` (K,) at budgets ``b`` (K,): V_idx(b + 1) - V_idx(b)."""

    @abstractmethod
    def gain_one(self, i: int, b: int) -> float:
        """Scalar gain of prompt i at budget b, in plain Python (for the textbook heap)."""

    def total_counter(self, low: int, up: int) -> Callable[[float], float]:
        """A function lam -> sum_i n_i(lam), possibly one off per prompt, for a quick search.

        Generic version: the exact count. `GeometricGains` returns a closed form.
        """
        return lambda lam: float(self.count_at_least(lam, low, up).sum())

    def count_at_least(self, lam: float, low: int, up: int, exact: bool = True) -> np.ndarray:
        """(M,) n_i = #{j in [0, up - low): gain_i(low + j) >= lam}.

        ``exact=False`` allows a count that float rounding puts one off (used to narrow a search
        cheaply); the result is then re-counted exactly. Generic version: vectorised integer
        bisection per prompt, valid for any non-increasing gains. Subclasses with closed forms override it.
        """
        width = up - low
        lo = np.zeros(self.size, dtype=np.int64)  # invariant: gain(low + lo - 1) >= lam (or lo == 0)
        hi = np.full(self.size, width, dtype=np.int64)  # invariant: n <= hi
        idx = np.arange(self.size)
        while True:
            active = lo < hi
            if not active.any():
                return lo
            mid = (lo + hi + 1) // 2  # candidate n; n >= mid iff gain(low + mid - 1) >= lam
            ok = self.gain_at(idx, low + mid - 1) >= lam
            lo = np.where(active & ok, mid, lo)
            hi = np.where(active & ~ok, mid - 1, hi)


class GeometricGains(GainModel):
    """V_i(B) = c_i (1 - exp(-k_i B)), so dV_i(B) = c_i (1 - e^{-k_i}) e^{-k_i B} (spec §4).

    This is CoBA's value with c_i = BetaPdf(p_i) and k_i = p_i (1 - p_i) / tau: gains fall
    geometrically with ratio e^{-k_i} < 1, strictly when c_i, k_i > 0.

    Args:
        c: (M,) float64 >= 0, the value at saturation.
        k: (M,) float64 >= 0, the per-rollout saturation rate.
    """

    closed_form_counts = True

    def __init__(self, c: np.ndarray, k: np.ndarray) -> None:
        self.c = np.asarray(c, dtype=np.float64)
        self.k = np.asarray(k, dtype=np.float64)
        if self.c.shape != self.k.shape or self.c.ndim != 1:
            raise ValueError(f"c and k must be 1-D of equal length, got {self.c.shape} and {self.k.shape}.")
        if (
            np.any(~np.isfinite(self.c))
            or np.any(self.c < 0)
            or np.any(~np.isfinite(self.k))
            or np.any(self.k < 0)
        ):
            raise ValueError("GeometricGains needs finite c >= 0 and k >= 0.")
        self.size = self.c.size
        self._step = self.c * -np.expm1(-self.k)  # (M,) dV(0) = c (1 - e^{-k})
        self._degenerate = (self._step <= 0.0) | (self.k <= 0.0)  # constant gains
        with np.errstate(divide="ignore"):
            self._log_step = np.log(self._step)  # (M,) log dV(0); -inf where c == 0
            self._inv_k = np.where(self._degenerate, 0.0, 1.0 / np.where(self._degenerate, 1.0, self.k))
        self._c_list = self.c.tolist()
        self._k_list = self.k.tolist()
        self._step_list = self._step.tolist()

    def value_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.c[idx] * -np.expm1(-self.k[idx] * np.asarray(b, dtype=np.float64))

    def gain_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._step[idx] * np.exp(-self.k[idx] * np.asarray(b, dtype=np.float64))

    def gain_one(self, i: int, b: int) -> float:
        return self._step_list[i] * math.exp(-self._k_list[i] * b)

    def gain(self, b: np.ndarray) -> np.ndarray:
        return self._step * np.exp(-self.k * np.asarray(b, dtype=np.float64))

    def total_counter(self, low: int, up: int) -> Callable[[float], float]:
        """lam -> sum_i clip(floor(a_i - log(lam) / k_i), 0, W), a_i = log dV_i(0) / k_i - low + 1.

        Four numpy calls per evaluation; float rounding may put a prompt's count one off.
        """
        width = float(up - low)
        with np.errstate(invalid="ignore"):
            a = np.where(self._degenerate, -np.inf, self._log_step * self._inv_k - low + 1.0)
        inv_k = self._inv_k

        def total(lam: float) -> float:
            if lam <= 0.0:
                return width * self.size
            raw = a - math.log(lam) * inv_k
            return float(np.clip(np.floor(raw, out=raw), 0.0, width, out=raw).sum())

        return total

    def count_at_least(self, lam: float, low: int, up: int, exact: bool = True) -> np.ndarray:
        """Closed form n_i = clip(floor((log dV_i(low) - log lam) / k_i) + 1, 0, W), then exact fix-up.

        Float rounding can put the closed form one off; with ``exact`` a comparison on each side
        against the very gains the other solvers use makes the count exact.
        """
        width = up - low
        if lam <= 0.0:
            return np.full(self.size, width, dtype=np.int64)  # every gain is >= 0
        raw = (self._log_step - math.log(lam)) * self._inv_k - low + 1.0  # (M,) n before floor/clip
        n = np.clip(np.floor(raw, out=raw), 0, width, out=raw)
        # k == 0 or c == 0: constant gain (0 when c == 0), all or nothing.
        if self._degenerate.any():
            n[self._degenerate] = np.where(self._step[self._degenerate] >= lam, width, 0)
        n = n.astype(np.int64)
        if exact:
            while True:
                too_many = (n > 0) & (self.gain(low + n - 1) < lam)
                too_few = (n < width) & (self.gain(low + n) >= lam)
                if not (too_many.any() or too_few.any()):
                    break
                n = n - too_many + too_few
        return n


class KnapsackGains(GainModel):
    """Knapsack-RL's value V(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2 (spec §9).

    dV(N) = p (1 - p)^2 [p^N (1 - p) + (1 - p)^N p]: non-increasing; zero when p in {0, 1}.
    """

    def __init__(self, p: np.ndarray) -> None:
        self.p = np.asarray(p, dtype=np.float64)
        if self.p.ndim != 1 or invalid_pass_rates(self.p).any():
            raise ValueError("KnapsackGains needs pass rates in [0, 1].")
        self.size = self.p.size
        self._w = self.p * (1.0 - self.p) ** 2  # (M,) the value's weight p (1 - p)^2
        self._p_list = self.p.tolist()

    def value_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        p = self.p[idx]
        n = np.asarray(b, dtype=np.float64)
        return (1.0 - p**n - (1.0 - p) ** n) * self._w[idx]

    def gain_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        p = self.p[idx]
        n = np.asarray(b, dtype=np.float64)
        return self._w[idx] * (p**n * (1.0 - p) + (1.0 - p) ** n * p)

    def gain_one(self, i: int, b: int) -> float:
        p = self._p_list[i]
        q = 1.0 - p
        return p * q * q * (p**b * q + q**b * p)
