"""GRESO's skip on CoBA budgets: a prompt unlikely to give a reward spread gets no rollouts this round.

Under DAPO dynamic sampling a group whose rewards are all equal is evicted, so its rollouts are
generated only to be thrown away. Before generation, prompt i's chance of a spread at its budget
B_i is predicted from its counts in the tracker's window (s_i successes of a_i attempts) with
their uncertainty, as the expectation over the Beta posterior of a uniform prior::

    chance_i = 1 - E[p^B_i + (1 - p)^B_i],   p ~ Beta(1 + s_i, 1 + a_i - s_i)

(`coba_verl.core.values.expected_no_spread`). A prompt with chance_i < ``threshold`` is skipped
(B_i = 0) unless its exploration draw u_i < ``explore`` (u_i uniform, seeded by the round and the
prompt id, so a run repeats exactly and a resumed run draws the same), so its pass rate is still
measured now and then. A prompt without history is never skipped. The round's total goes to the
kept prompts by the same solve (within B_up); where the kept prompts cannot hold it, the skipped
prompts with the highest chance come back until they can. A skipped prompt gives the tracker
nothing: no outcome is invented for it.

Applied by `coba_verl.core.allocator.BudgetAllocator.allocate` when ``coba.skip_spread_below`` > 0
(veRL's V1 sync trainer with DAPO, the lab's DAPO run option ``+skip``, `coba-verl plan`); the study
that measures it is docs/dapo_n16_design.md (change C-skip, amendment 1, item 4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coba_verl.core.values import expected_no_spread

__all__ = ["SkipRule", "spread_chance", "skip_unlikely_spread"]

#: Mixed into every exploration draw's seed, so it shares no stream with other seeded draws.
_SKIP_SEED = 0x5C1B


@dataclass(frozen=True)
class SkipRule:
    """``threshold``: skip below this predicted chance of a spread (the design's 0.1);
    ``explore``: chance that a prompt due to be skipped is drawn anyway (0.1)."""

    threshold: float = 0.1
    explore: float = 0.1

    def __post_init__(self) -> None:
        for name in ("threshold", "explore"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"skip {name}={value} must lie in [0, 1].")


def spread_chance(successes: np.ndarray, attempts: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """(M,) 1 - E[p^B + (1 - p)^B] under p ~ Beta(1 + s, 1 + a - s); NaN where a = 0 (no history).

    >>> spread_chance(np.array([0, 4, 0]), np.array([8, 8, 0]), np.array([2, 2, 2])).round(3).tolist()
    [0.164, 0.455, nan]
    """
    s = np.asarray(successes, dtype=np.float64)
    a = np.asarray(attempts, dtype=np.float64)
    b = np.asarray(budgets, dtype=np.int64)
    out = np.full(s.size, np.nan)
    for budget in np.unique(b[a > 0]):
        at = (a > 0) & (b == budget)
        out[at] = 1.0 - expected_no_spread(1.0 + s[at], 1.0 + a[at] - s[at], int(budget))
    return out


def skip_unlikely_spread(
    ids: np.ndarray,
    budgets: np.ndarray,
    successes: np.ndarray,
    attempts: np.ndarray,
    rule: SkipRule,
    resolve: Callable[[np.ndarray], np.ndarray],
    *,
    up: int,
    round_key: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The round's budgets with unlikely-spread prompts set to 0 (module docstring).

    Args:
        ids: (M,) prompt ids of the round.
        budgets: (M,) the budgets of the solve with every prompt in (their sum is the round's total).
        successes, attempts: (M,) each prompt's counts in the tracker's window.
        rule: threshold and exploration chance.
        resolve: ``resolve(kept) -> (K,) budgets`` re-solves the round's total over the kept
            positions ``kept`` (sorted, K >= 1), within [B_low, B_up].
        up: B_up, to know how many prompts must stay to hold the total.
        round_key: seeds the exploration draws with the prompt ids (e.g. the round's number).

    Returns:
        ((M,) int64 budgets, 0 where skipped; (M,) bool skipped).
    """
    ids = np.asarray(ids, dtype=np.int64)
    budgets = np.asarray(budgets, dtype=np.int64)
    chance = spread_chance(successes, attempts, budgets)
    draws = np.array([np.random.default_rng([_SKIP_SEED, round_key, int(i)]).random() for i in ids])
    skipped = (chance < rule.threshold) & (draws >= rule.explore)  # NaN (no history) never skips
    total = int(budgets.sum())
    need = -(-total // up)  # fewest prompts that can hold the total within B_up
    if ids.size - int(skipped.sum()) < need:
        back = np.flatnonzero(skipped)[np.argsort(-chance[skipped], kind="stable")]
        skipped[back[: need - (ids.size - int(skipped.sum()))]] = False
    if not skipped.any():
        return budgets, skipped
    out = np.zeros_like(budgets)
    kept = np.flatnonzero(~skipped)
    out[kept] = resolve(kept)
    if int(out.sum()) != total:
        raise RuntimeError(f"the skip's re-solve spent {int(out.sum())} rollouts, not the round's {total}")
    return out, skipped
