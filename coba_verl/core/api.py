"""`allocate`: one call from pass rates to budgets, no trainer needed (spec §4-6, §9)."""

from __future__ import annotations

from typing import Any

import numpy as np

from coba_verl.core.allocator import allocate_from_rates
from coba_verl.core.capability import beta_shape, initial_beta_shape, psi
from coba_verl.core.config import CobaConfig


def allocate(
    pass_rates: Any,
    total_budget: int,
    min_rollouts: int = 2,
    max_rollouts: int = 128,
    *,
    strategy: str = "coba",
    alpha: float | None = None,
    beta: float | None = None,
    kappa: float = 11.0,
    tau: float | None = None,
    solver: str = "fast",
) -> np.ndarray:
    """Rollouts per prompt maximising sum_i V(B_i, p_i) s.t. sum B_i = total_budget, bounds (Spec §5).

    Args:
        pass_rates: (M,) recent pass rate of each prompt in [0, 1]; NaN marks a prompt without
            history (it is valued at 0.5, and an all-NaN batch is split uniformly, spec §2).
        total_budget: rollouts to hand out, e.g. M * 16.
        min_rollouts: B_low (>= 2 for GRPO).
        max_rollouts: B_up.
        strategy: ``coba`` | ``coba_release`` | ``knapsack`` | ``uniform`` | ``static`` | ``reverse``
            (see `CobaConfig`).
        alpha, beta: Beta shape. ``None`` for coba/coba_release/reverse derives it as a trainer
            would after one step whose prompts had these pass rates: F = 1 - mean(p), then
            alpha = clip(1 + (kappa - 2) Psi(F), 1, kappa - 1), beta = kappa - alpha (spec §3).
            For ``static`` they default to `CobaConfig`'s static shape.
        kappa: alpha + beta when the shape is derived.
        tau: saturation temperature; ``None`` is the adaptive rule (spec §4).
        solver: ``fast`` | ``heap`` | ``dp``: all exact, ``fast`` is quickest.

    Returns:
        (M,) int64 budgets, summing to ``total_budget``, within [min_rollouts, max_rollouts].

    Raises:
        ValueError: infeasible budget, empty batch, pass rates outside [0, 1], unknown strategy.

    Examples:
        >>> import numpy as np
        >>> allocate(np.array([0.0, 0.2, 0.5, 0.9, 1.0]), total_budget=40, max_rollouts=16).tolist()
        [2, 16, 16, 4, 2]
    """
    p = np.asarray(pass_rates, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"pass_rates must be one-dimensional, got shape {p.shape}.")
    known = p[~np.isnan(p)]
    if np.any((known < 0) | (known > 1)) or np.any(np.isinf(p)):
        bad = p[np.isinf(p) | (p < 0) | (p > 1)][0]
        raise ValueError(f"pass rate {bad} is outside [0, 1].")
    static = {} if alpha is None or beta is None else {"static_alpha": alpha, "static_beta": beta}
    config = CobaConfig(
        strategy=strategy,
        min_rollouts=min_rollouts,
        max_rollouts=max_rollouts,
        kappa=kappa,
        tau=tau,
        solver=solver,
        **static,
    )
    if alpha is not None and beta is not None:
        shape = (float(alpha), float(beta))
    elif known.size:
        fail = 1.0 - float(known.mean())
        shape = beta_shape(psi(1.0 - fail if strategy == "reverse" else fail), kappa)
    else:
        shape = initial_beta_shape(kappa)
    return allocate_from_rates(p, total_budget, config, shape=shape).budgets
