"""`allocate`: one call from pass rates to budgets, no trainer needed (spec §4-6, §9)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from coba_verl.core.allocator import allocate_from_rates
from coba_verl.core.capability import capability_shape
from coba_verl.core.config import CobaConfig, check_int, check_shape
from coba_verl.core.solvers import check_budget
from coba_verl.core.values import check_pass_rates
from coba_verl.refusal import CobaRefusal, CobaTypeRefusal

#: Strategies that derive their Beta shape from the pass rates unless alpha and beta fix it.
_DERIVED_SHAPE = ("coba", "coba_release", "reverse")


class _AllocateConfig(CobaConfig):
    """`CobaConfig` whose messages name `allocate`'s arguments, not the ``coba.*`` keys."""

    _caller_depth = 4  # and allocate() itself

    def _name(self, field: str) -> str:
        return {"static_alpha": "alpha", "static_beta": "beta"}.get(field, field)

    def _token_budget_names(self) -> tuple[str, str]:
        """`allocate` has no ``budget_unit``: its ``lengths`` ask for the token budget."""
        return "lengths (a token budget)", "Pass lengths=None to count rollouts"


def _as_floats(values: Any, name: str) -> np.ndarray:
    """``values`` as a float64 array, or a TypeError naming ``name`` and the first entry that is no number."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        flat = values if isinstance(values, list | tuple) else [values]
        for j, value in enumerate(flat):
            try:
                float(value)
            except (TypeError, ValueError):
                where = f"{name}[{j}]={value!r}" if flat is values else f"{name}={value!r}"
                raise CobaTypeRefusal(
                    f"{where} is not a number: give each prompt's pass rate as a float in [0, 1] "
                    "(NaN for a prompt without history)."
                ) from None
        raise CobaTypeRefusal(
            f"{name} cannot be read as a one-dimensional array of floats: {values!r}."
        ) from None


def allocate(
    pass_rates: Any,
    total_budget: int,
    min_rollouts: int = CobaConfig.min_rollouts,
    max_rollouts: int = CobaConfig.max_rollouts,
    *,
    strategy: str = CobaConfig.strategy,
    alpha: float | None = None,
    beta: float | None = None,
    kappa: float = CobaConfig.kappa,
    tau: float | None = CobaConfig.tau,
    solver: str = CobaConfig.solver,
    lengths: Any = None,
) -> np.ndarray:
    """Rollouts per prompt maximising sum_i V(B_i, p_i) s.t. sum B_i = total_budget, bounds (Spec §5).

    Defaults and checks are `CobaConfig`'s, so this call follows the rules a trainer does.

    Args:
        pass_rates: (M,) recent pass rate of each prompt in [0, 1]; NaN marks a prompt without
            history (it is valued at 0.5, and an all-NaN batch is split uniformly, spec §2).
        total_budget: rollouts to hand out, e.g. M * 16.
        min_rollouts: B_low; at least 2, since a GRPO group of one has no baseline.
        max_rollouts: B_up.
        strategy: ``coba`` | ``coba_release`` | ``knapsack`` | ``uniform`` | ``static`` | ``reverse``
            (see `CobaConfig`). ``uniform`` gives total_budget // M each and one more to each of
            the first total_budget % M prompts.
        alpha, beta: A fixed Beta shape, both or neither, each >= 1. ``None`` for
            coba/coba_release/reverse derives it as a trainer would after one step whose prompts
            had these pass rates: F = 1 - mean(p), then alpha = clip(1 + (kappa - 2) Psi(F), 1,
            kappa - 1), beta = kappa - alpha (spec §3); for ``static`` it is `CobaConfig`'s static
            shape. ``knapsack`` and ``uniform`` use no Beta.
        kappa: alpha + beta when the shape is derived.
        tau: saturation temperature; ``None`` is the adaptive rule (spec §4).
        solver: ``fast`` | ``heap`` | ``dp``: all exact, ``fast`` is quickest.
        lengths: (M,) mean response tokens per rollout of each prompt (NaN: unknown), or None.
            Given, the budget counts tokens (``budget_unit=tokens``): sum_i B_i L_i <=
            total_budget / M * sum_i L_i, so the sum of the budgets varies
            (`coba_verl.core.token_budget`; coba, static and reverse only).

    Returns:
        (M,) int64 budgets within [min_rollouts, max_rollouts], summing to ``total_budget`` (with
        ``lengths``: sum_i B_i L_i <= total_budget / M * sum_i L_i).

    Raises:
        ValueError: infeasible budget, empty batch, pass rates outside [0, 1], a length that is
            neither NaN nor finite and > 0, unknown strategy or solver, min_rollouts < 2, alpha
            without beta (or beta without alpha), a knob out of range; each message names the
            argument as passed here.
        TypeError: an argument of the wrong type, e.g. ``total_budget="40"`` or a pass rate that is
            not a number (``pass_rates=['abc']``).

    Warns:
        UserWarning: an argument that cannot change this strategy's budgets (e.g. ``alpha`` and
            ``beta`` with ``knapsack``, ``kappa`` once alpha and beta are fixed), naming it.

    Examples:
        >>> import numpy as np
        >>> allocate(np.array([0.0, 0.2, 0.5, 0.9, 1.0]), total_budget=40, max_rollouts=16).tolist()
        [2, 16, 16, 4, 2]
        >>> allocate(np.array([0.0, 0.2, 0.5, 0.9, 1.0]), 41, strategy="uniform").tolist()
        [9, 8, 8, 8, 8]
    """
    p = check_pass_rates(_as_floats(pass_rates, "pass_rates"), "pass_rates", unseen=True)
    total = check_int("total_budget", total_budget)
    if (alpha is None) != (beta is None):
        given, value, missing = ("alpha", alpha, "beta") if beta is None else ("beta", beta, "alpha")
        raise CobaRefusal(
            f"{given}={value!r} was given without {missing}: pass both to fix the Beta shape, or "
            "neither to derive it from the pass rates."
        )
    fixed = alpha is not None
    if fixed:
        alpha, beta = check_shape(alpha, beta)
    config = _AllocateConfig(
        strategy=strategy,
        min_rollouts=min_rollouts,
        max_rollouts=max_rollouts,
        kappa=kappa,
        tau=tau,
        solver=solver,
        budget_unit="rollouts" if lengths is None else "tokens",
        **({"static_alpha": alpha, "static_beta": beta} if fixed and strategy == "static" else {}),
    )
    check_budget(
        p.size, total, config.min_rollouts, config.max_rollouts,
        total_name="total_budget", low_name="min_rollouts", up_name="max_rollouts",
    )  # fmt: skip
    ignored = None
    if fixed and strategy not in (*_DERIVED_SHAPE, "static"):
        ignored = f"alpha={alpha}, beta={beta} do not change the budgets of strategy={strategy!r}; they are"
    elif fixed and strategy in _DERIVED_SHAPE and config.kappa != CobaConfig.kappa:
        ignored = f"kappa={config.kappa} does not change the budgets once alpha and beta are given; it is"
    if ignored:
        warnings.warn(f"{ignored} ignored.", UserWarning, stacklevel=2)
    known = p[~np.isnan(p)]
    f_bar = 1.0 - float(known.mean()) if known.size else float("nan")
    shape = (alpha, beta) if fixed else capability_shape(f_bar, config.kappa, reverse=strategy == "reverse")
    if lengths is not None:
        lengths = _as_floats(lengths, "lengths")
        if lengths.shape != p.shape:
            raise CobaRefusal(f"lengths has {lengths.size} entries for {p.size} pass rates.")
    return allocate_from_rates(p, total, config, shape=shape, lengths=lengths).budgets
