"""What a lab step's groups and its update batch are made of: the pass-rate histogram of a step's
prompts (`pass_histogram`, bins `PASS_BINS`) and the update's group by group composition
(`batch_composition`, docs/lab/dapo_why_design.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from coba_verl.core.group_weight import rollout_weights

PASS_BINS = ("0", "(0,.25)", "[.25,.5)", "[.5,.75)", "[.75,1)", "1")
"""Names of the per-prompt pass-rate bins of ``pass_hist`` (counts of the step's prompts)."""


def pass_histogram(rates: np.ndarray) -> list[int]:
    """Counts of ``rates`` (M,) in `PASS_BINS`: exactly 0, four quarters of (0, 1), exactly 1."""
    inner = rates[(rates > 0) & (rates < 1)]
    quarters = np.bincount(np.minimum((inner * 4).astype(np.int64), 3), minlength=4)
    return [int(np.sum(rates == 0)), *map(int, quarters), int(np.sum(rates == 1))]


def batch_composition(
    index: np.ndarray, scores: np.ndarray, rates: np.ndarray, ages: np.ndarray, group_weight: str
) -> dict[str, Any]:
    """What one update trains, group by group (docs/lab/dapo_why_design.md, "Measured").

    Args:
        index: (R,) group number 0..G-1 of each trained rollout.
        scores: (R,) their rewards.
        rates: (G,) each trained group's pass rate over all its generated rollouts.
        ages: (G,) steps since each group's allocation round was allocated.
        group_weight: ``coba.group_weight`` of the run.

    Returns:
        ``trained_groups`` G; ``trained_size_mean`` / ``_max`` (trained rollouts a group);
        ``trained_eff_groups`` = (sum_g m_g)^2 / sum_g m_g^2 and ``trained_top_mass`` =
        max_g m_g / sum_g m_g, where m_g = sum_{r in g} |A_r| w_r is group g's advantage mass:
        A_r = (s_r - mean_g) / (std_g + 1e-6), veRL's GRPO outcome advantage over the trained
        rollouts of g (unbiased std; 0 for a group of one), w_r its `rollout_weights` factor
        (NaN when no group has any); ``trained_pass_hist`` (`PASS_BINS` counts of ``rates``);
        ``trained_age_mean`` (mean of ``ages`` over the groups).
    """
    groups = int(rates.size)
    sizes = np.bincount(index, minlength=groups).astype(np.float64)  # (G,)
    sums = np.bincount(index, weights=scores, minlength=groups)
    means = sums / np.maximum(sizes, 1)
    squares = np.bincount(index, weights=(scores - means[index]) ** 2, minlength=groups)
    std = np.sqrt(squares / np.maximum(sizes - 1, 1))  # unbiased, as torch.std
    adv = np.where(sizes[index] > 1, (scores - means[index]) / (std[index] + 1e-6), 0.0)  # (R,)
    mass = np.bincount(index, weights=np.abs(adv) * rollout_weights(index, group_weight), minlength=groups)
    total = float(mass.sum())
    return {
        "trained_groups": groups,
        "trained_size_mean": float(sizes.mean()),
        "trained_size_max": int(sizes.max()),
        "trained_eff_groups": total**2 / float(np.sum(mass**2)) if total > 0 else float("nan"),
        "trained_top_mass": float(mass.max()) / total if total > 0 else float("nan"),
        "trained_pass_hist": pass_histogram(rates),
        "trained_age_mean": float(np.mean(ages)),
    }
