"""Knapsack-RL's allocation rules, the main baseline (spec §9; Knapsack RL, arXiv 2509.25849).

Given each prompt's pass rate at its last appearance (NaN = no history) and n = total // M:

1. Prompts without history get n = total // M wherever they sit in the batch (Knapsack-RL's
   uniform n; what a total that is not a multiple of M leaves over is shared by the rules below,
   like the rest). Prompts with p = 0 or p = 1 get ``low``. Prompts with 0 < p < 1
   ("effective") start at ``low`` and compete in the knapsack.
2. With R the budget left: the knapsack can usefully absorb about
   est = sum_eff floor(min(up, ln(0.1) / ln(max(p, 1 - p)))) rollouts (N where the chance of an
   all-equal group drops to 10 %). If est < R, R - est goes evenly to the p = 0 prompts (or, if
   there are none, to every non-effective prompt) and the knapsack gets est.
3. The effective prompts maximise sum V(N_i, p_i), V(N, p) = (1 - p^N - (1 - p)^N) p (1 - p)^2,
   over N_i in [low, up] with the exact budget. V is concave in N, so the exact greedy optimiser
   equals the release's multiple-choice knapsack DP.
4. No effective prompts: R goes evenly to the p = 0 prompts, or everyone gets the uniform split.

Differences from the released code, on purpose: a prompt counts as "with history" after one
appearance (the release waits for 8 recorded rollouts); the DP's "no extra rollout" option is
valued at V(low) (the release scores it 0, which pushes every prompt above ``low``); nothing
exceeds ``up`` (what the caps refuse goes to any prompt with room, in batch order); a prompt
without history is not a p = 0 prompt (the release keeps its rate at 0.0, so it shares the
surplus meant for never-solved prompts); when every prompt is effective and R exceeds est, the
knapsack takes all of R (the release divides by zero there and fails its own sum check).
"""

from __future__ import annotations

import math

import numpy as np

from coba_verl.core.solvers import check_budget, solve
from coba_verl.core.spread import spread_even, uniform_split
from coba_verl.core.values import KnapsackValue

#: Knapsack-RL's target: max(p, 1 - p)^N = 1 - ALPHA, i.e. a 90 % chance of a mixed group.
COVERAGE = 0.9


def knapsack_cost_estimate(p: np.ndarray, up: int) -> int:
    """est = sum floor(min(up, ln(1 - 0.9) / ln(max(p, 1 - p)))) over 0 < p < 1 (spec §9) [release]."""
    q = np.maximum(p, 1.0 - p)  # in [0.5, 1]; rounds to 1.0 for p within 1e-16 of 0 or 1
    with np.errstate(divide="ignore"):
        n = np.where(q < 1.0, math.log(1.0 - COVERAGE) / np.log(q), np.inf)
    return int(np.sum(np.floor(np.minimum(up, n))))


def allocate_knapsack(last_p: np.ndarray, total: int, low: int, up: int, solver: str = "fast") -> np.ndarray:
    """Budgets (M,) by Knapsack-RL's rules; ``last_p`` (M,) is NaN for prompts without history."""
    p = np.asarray(last_p, dtype=np.float64)
    check_budget(p.size, total, low, up)
    m = p.size
    unseen = np.isnan(p)
    uniform = uniform_split(m, total)
    if unseen.all():
        return uniform
    n = int(total) // m  # low <= n <= up when feasible; the remainder joins ``rest``
    budgets = np.where(unseen, n, low).astype(np.int64)  # [NaN, 0.3, NaN] -> [n, low, n]
    effective = np.flatnonzero(~unseen & (p > 0) & (p < 1))
    zeros = np.flatnonzero(~unseen & (p == 0))
    rest = int(total) - int(budgets.sum())
    if effective.size:
        knap_budget = rest
        est = knapsack_cost_estimate(p[effective], up)
        if est < rest:
            others = zeros if zeros.size else np.setdiff1d(np.arange(m), effective)
            if others.size:
                knap_budget = est
                spread_even(budgets, others, rest - est, up)  # refusals are re-homed below
        knap_budget = min(knap_budget, effective.size * (up - low))
        gains = KnapsackValue().gains(p[effective])
        # 0 <= knap_budget <= effective.size * (up - low): feasible by construction
        budgets[effective] = solve(gains, effective.size * low + knap_budget, low, up, solver=solver)
    elif zeros.size:
        spread_even(budgets, zeros, rest, up)
    else:
        return uniform
    # What the caps refused goes to any prompt with room, in batch order.
    left = spread_even(budgets, np.arange(m), int(total) - int(budgets.sum()), up)
    assert left == 0 and int(budgets.sum()) == int(total), "a feasible budget always fits under the caps"
    return budgets
