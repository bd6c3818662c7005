"""The lab's positive control: allocations fed the exact pass rates, and the shipped estimates measured.

`MeasuredAllocator` stands where a run's `BudgetAllocator` stood (the step loop and DAPO's
`PromptStream` call it alike). At every allocation it computes the exact pass rate p_i of each of
the round's prompts under the current model (`coba_verl.lab.exact_rates`, one forward) and:

* measures the shipped tracker's estimate p̂_i against it (`estimation_measures`): mean absolute
  error and rank correlation over the prompts with history, how many prompts sit at p̂ = 0 or 1
  while 0.05 < p < 0.95, and the share of the round's rollouts CoBA would move if it allocated
  from p instead of p̂ (same Beta shape, the tracker's);
* for an oracle run (label option ``+oracle``), allocates from p instead of p̂, everything else as
  shipped (`oracle_allocation`):

  - ``coba+oracle``: CoBA's value with p and the exact capability, F̄ = 1 - mean_i p_i over the
    round's prompts (spec §3, with no moving average: the current policy's own failure rate);
  - ``knapsack+oracle``: Knapsack-RL's rules (spec §9) with p as every prompt's last pass rate;
  - ``signal+oracle`` (lab only): the budgets that maximise the expected number of rollouts in
    groups with a reward spread, sum_i B_i (1 - p_i^B_i - (1 - p_i)^B_i), the rollouts that carry
    a GRPO advantage; the curve is not concave (for small p it grows like B^2 p), so it is solved
    by the exact dynamic programme (`coba_verl.core.solvers.solve_dp`).

The tracker still observes every rollout, so the estimates of an oracle run are measured too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

from coba_verl.core import Allocation, BudgetAllocator
from coba_verl.core.allocator import allocate_from_rates
from coba_verl.core.capability import capability_shape
from coba_verl.core.config import CobaConfig
from coba_verl.core.gains import GainModel
from coba_verl.core.solvers import check_budget, solve_dp
from coba_verl.core.values import no_spread_probability

__all__ = [
    "ORACLE_STRATEGIES",
    "ESTIMATION_KEYS",
    "MeasuredAllocator",
    "SignalGains",
    "estimation_measures",
    "oracle_allocation",
]

#: Strategies a ``+oracle`` run may take: the shipped two and the lab's own ``signal``.
ORACLE_STRATEGIES = ("coba", "knapsack", "signal")
#: Exact p inside this range while p̂ says 0 or 1: an estimate at the wrong end.
EXTREME_RANGE = (0.05, 0.95)


class SignalGains(GainModel):
    """V_i(B) = B (1 - p_i^B - (1 - p_i)^B): rollouts expected in a group with a reward spread."""

    def __init__(self, p: np.ndarray) -> None:
        self.p = np.asarray(p, dtype=np.float64)
        self.size = self.p.size

    def value_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=np.float64)
        return b * (1.0 - no_spread_probability(self.p[np.asarray(idx)], b))

    def gain_at(self, idx: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.value_at(idx, np.asarray(b) + 1) - self.value_at(idx, b)

    def gain_one(self, i: int, b: int) -> float:
        return float(self.gain_at(np.array([i]), np.array([b]))[0])


def oracle_allocation(strategy: str, p: np.ndarray, total: int, config: CobaConfig) -> Allocation:
    """Budgets (M,) from exact pass rates ``p`` (M,) by ``strategy`` (module doc), config's bounds.

    >>> cfg = CobaConfig(strategy="coba")
    >>> oracle_allocation("signal", np.array([0.5, 0.5]), 8, cfg).budgets.tolist()
    [4, 4]
    """
    p = np.asarray(p, dtype=np.float64)
    low, up = config.min_rollouts, config.max_rollouts
    check_budget(p.size, total, low, up)
    if strategy == "signal":
        budgets = solve_dp(SignalGains(p), total, low, up)
        return Allocation(
            budgets, p, "signal", min_rollouts=low, max_rollouts=up, rollouts_per_prompt=total / p.size
        )
    if strategy not in ORACLE_STRATEGIES:
        raise ValueError(f"oracle strategy {strategy!r} is not one of {ORACLE_STRATEGIES}")
    cfg = dataclasses.replace(config, strategy=strategy)
    shape = capability_shape(1.0 - float(p.mean()), cfg.kappa)
    return allocate_from_rates(p, total, cfg, shape=shape, last_pass_rates=p)


#: The row keys of `estimation_measures` (each NaN where it has no prompt to average over).
ESTIMATION_KEYS = (
    "est_mae", "est_rank_corr", "est_seen", "est_extreme", "est_extreme_wrong", "est_budget_moved",
    "exact_pass_mean", "exact_bound_max",
)  # fmt: skip


def estimation_measures(
    p_hat: np.ndarray, p: np.ndarray, bound: np.ndarray, coba_hat: np.ndarray, coba_exact: np.ndarray
) -> dict[str, float]:
    """The shipped estimate p̂ (M,) (NaN: no history) against the exact p (M,) of one allocation.

    est_mae          mean_i |p̂_i - p_i| over prompts with history
    est_rank_corr    Spearman's rho of p̂ and p over them (NaN for fewer than 3 or a constant side)
    est_seen         prompts with history
    est_extreme      prompts with p̂ in {0, 1}
    est_extreme_wrong  of those, prompts with 0.05 < p < 0.95
    est_budget_moved   sum_i |B̂_i - B*_i| / (2 sum_i B*_i): the share of rollouts CoBA puts elsewhere
                     with p̂ than with p (same shape)
    exact_pass_mean  mean_i p_i (1 - the exact F_t of the round)
    exact_bound_max  the largest bound on paths the exact rate leaves out (`exact_pass_rates`)
    """
    seen = ~np.isnan(p_hat)
    ph, pe = p_hat[seen], p[seen]
    rho = float("nan")
    if ph.size >= 3 and np.ptp(ph) > 0 and np.ptp(pe) > 0:
        rho = float(stats.spearmanr(ph, pe).statistic)
    extreme = (ph == 0) | (ph == 1)
    low, high = EXTREME_RANGE
    return {
        "est_mae": float(np.abs(ph - pe).mean()) if ph.size else float("nan"),
        "est_rank_corr": rho,
        "est_seen": float(ph.size),
        "est_extreme": float(extreme.sum()),
        "est_extreme_wrong": float(np.sum(extreme & (pe > low) & (pe < high))),
        "est_budget_moved": float(np.abs(coba_hat - coba_exact).sum() / (2 * coba_exact.sum())),
        "exact_pass_mean": float(p.mean()),
        "exact_bound_max": float(bound.max()) if bound.size else float("nan"),
    }


#: ``exact(ids) -> (p, bound)``: the exact pass rates of training prompts ``ids`` under the current model.
ExactFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class MeasuredAllocator:
    """A run's allocator with every allocation measured against exact pass rates (module doc).

    Args:
        inner: the run's `BudgetAllocator` (its tracker observes every rollout, oracle or not).
        exact: the exact pass rates of a round's prompts.
        oracle: ``None`` (allocate as shipped) or one of `ORACLE_STRATEGIES`.
    """

    def __init__(self, inner: BudgetAllocator, exact: ExactFn, oracle: str | None = None) -> None:
        if oracle is not None and oracle not in ORACLE_STRATEGIES:
            raise ValueError(f"oracle strategy {oracle!r} is not one of {ORACLE_STRATEGIES}")
        self.inner = inner
        self.exact = exact
        self.oracle = oracle
        self._measures: list[dict[str, float]] = []

    def __getattr__(self, name: str) -> Any:  # observe, end_step, tracker, config, ...
        return getattr(self.inner, name)

    def allocate(self, ids: Any, total: int) -> Allocation:
        ids_a = np.asarray(ids, dtype=np.int64)
        p, bound = self.exact(ids_a)
        tracker = self.inner.tracker
        p_hat = tracker.pass_rates(ids_a)
        coba = dataclasses.replace(self.inner.config, strategy="coba", skip_spread_below=0.0)
        shape = tracker.shape()
        coba_hat = allocate_from_rates(p_hat, total, coba, shape=shape).budgets
        coba_exact = allocate_from_rates(p, total, coba, shape=shape).budgets
        self._measures.append(estimation_measures(p_hat, p, bound, coba_hat, coba_exact))
        if self.oracle is None:
            return self.inner.allocate(ids_a, total)
        out = oracle_allocation(self.oracle, p, total, self.inner.config)
        out.extra["oracle"] = 1.0
        return out

    def step_measures(self) -> dict[str, float]:
        """The measures of the allocations since the last call: means of the rates, sums of the
        counts; every key NaN when there was none (a DAPO step served by an earlier round)."""
        done, self._measures = self._measures, []
        if not done:
            return dict.fromkeys(ESTIMATION_KEYS, float("nan"))
        counts = {"est_seen", "est_extreme", "est_extreme_wrong"}
        out: dict[str, float] = {}
        for key in ESTIMATION_KEYS:
            vals = [m[key] for m in done if not math.isnan(m[key])]
            if key in counts:
                out[key] = float(sum(vals))
            elif key == "exact_bound_max":
                out[key] = max(vals) if vals else float("nan")
            else:
                out[key] = float(np.mean(vals)) if vals else float("nan")
        return out
