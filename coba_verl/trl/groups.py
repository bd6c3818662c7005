"""Variable GRPO groups for TRL: collapse TRL's repeated rows, expand by budget, group advantages.

Notation (shapes as comments beside the arrays):

    G   TRL's ``num_generations``          M   prompts in one generation round
    T   rows of the round, T = M * G       W   processes, each holding L = T / W rows
    F   reward functions                   B   (M,) per-prompt budgets, sum B == T

Every function here is pure: numpy, torch and `coba_verl.core` only, no trainer state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from trl.trainer.utils import nanstd

from coba_verl.core.allocator import prompt_mean_score as core_prompt_mean_score
from coba_verl.records.rounds import group_index

__all__ = [
    "collapse_runs",
    "expand_rows",
    "group_index",
    "group_advantages",
    "padded_groups",
    "prompt_mean_score",
    "row_scores",
]

#: TRL 1.16's ``scale_rewards`` choices and ``multi_objective_aggregation`` choices.
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
AGGREGATIONS: tuple[str, ...] = ("sum_then_normalize", "normalize_then_sum")

# TRL's epsilon in the denominators of its advantage (grpo_trainer.py, 1.16).
_STD_EPS = 1e-4


def collapse_runs(row_ids: Sequence[Any], num_generations: int) -> np.ndarray:
    """Positions of the first row of each run of ``num_generations`` equal ids: one row per prompt.

    TRL's ``RepeatSampler`` repeats every prompt of a round G times in a row, so the round's
    gathered rows are M runs of G::

        row_ids [7, 7, 7, 2, 2, 2, 5, 5, 5]  (G = 3)  ->  [0, 3, 6]   (prompts 7, 2, 5)

    Raises:
        RuntimeError: if the rows are not whole runs of G equal ids (a sampler other than TRL's).
    """
    ids = np.asarray(row_ids, dtype=object)
    t, g = ids.size, int(num_generations)
    if t == 0 or t % g:
        raise RuntimeError(
            f"a generation round of {t} rows cannot be M runs of num_generations={g} copies; "
            "CobaGRPOTrainer expects the rows of TRL's RepeatSampler."
        )
    runs = ids.reshape(t // g, g)  # (M, G)
    bad = np.flatnonzero(~np.all(runs == runs[:, :1], axis=1))
    if bad.size:
        i = int(bad[0])
        raise RuntimeError(
            f"rows {i * g}..{i * g + g - 1} of the generation round hold prompt ids {runs[i].tolist()}, "
            f"not {g} copies of one prompt as TRL's RepeatSampler yields; a custom train sampler or "
            "collator cannot be combined with CobaGRPOTrainer."
        )
    return np.arange(0, t, g, dtype=np.int64)


def expand_rows(rows: Sequence[dict[str, Any]], budgets: np.ndarray) -> list[dict[str, Any]]:
    """Each prompt row i repeated B_i times as shallow copies (TRL writes into its input rows)::

    rows [a, b, c], B [2, 3, 1]  ->  [a, a, b, b, b, c]
    """
    if len(rows) != len(budgets):
        raise ValueError(f"{len(rows)} prompt rows but {len(budgets)} budgets; they must align.")
    return [dict(rows[i]) for i in group_index(budgets).tolist()]


def padded_groups(values: torch.Tensor, budgets: np.ndarray) -> torch.Tensor:
    """Lay the T rows of ``values`` (T, ...) out as (M, max B, ...), NaN where a group is shorter.

    With every B_i = G this is exactly TRL's ``values.view(-1, G, ...)``, so NaN-aware reductions
    over dim 1 (TRL's ``torch.nanmean`` and ``nanstd``) give TRL's numbers bit for bit::

        values [r0, r1, r2, r3, r4], B [2, 3]  ->  [[r0, r1, nan],
                                                     [r2, r3, r4 ]]

    Returns (M, max B, ...), of ``values``' dtype.
    """
    b = torch.as_tensor(np.asarray(budgets, dtype=np.int64), device=values.device)
    m, width = b.numel(), int(b.max())
    row = torch.repeat_interleave(torch.arange(m, device=values.device), b)  # (T,)
    starts = torch.cumsum(b, 0) - b  # (M,) first row of each group
    col = torch.arange(values.shape[0], device=values.device) - starts[row]  # (T,)
    padded = torch.full((m, width, *values.shape[1:]), float("nan"), dtype=values.dtype, device=values.device)
    padded[row, col] = values
    return padded


def group_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    budgets: np.ndarray,
    *,
    scale_rewards: str,
    multi_objective_aggregation: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's GRPO advantage with the group of prompt i being its B_i rows instead of G.

    Follows TRL 1.16.0 ``GRPOTrainer._generate_and_score_completions`` (the block from
    ``unscorable_mask`` to ``torch.nan_to_num(advantages)``) with ``view(-1, G)`` replaced by
    `padded_groups`. With r_j the weighted reward of row j in group g(j):

        sum_then_normalize:  A_j = (r_j - mean_g r) / (s + 1e-4), s = std_g r (``group``),
                             std of all r (``batch``), or no division (``none``)
        normalize_then_sum:  per reward function k, z_jk = (r_jk - mean_g r_k) / (std_g r_k + 1e-4);
                             r_j = sum_k w_k z_jk; A_j = (r_j - mean r) / (std r + 1e-4)

    Means and (Bessel-corrected) standard deviations skip NaN rewards; a row every reward function
    left unscored (all NaN) gets advantage 0. A group of one row has std 0, as in TRL.

    Args:
        rewards_per_func: (T, F) gathered rewards of the round, rows in group order.
        reward_weights: (F,) TRL's ``reward_weights``.
        budgets: (M,) B_i, sum == T.

    Returns:
        advantages: (T,) float.
        is_std_zero: (T,) bool, TRL's per-row "zero std" flag behind ``frac_reward_zero_std``.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards={scale_rewards!r} is unknown; choose one of {SCALE_REWARDS}.")
    if multi_objective_aggregation not in AGGREGATIONS:
        raise ValueError(
            f"multi_objective_aggregation={multi_objective_aggregation!r} is unknown; "
            f"choose one of {AGGREGATIONS}."
        )
    t = rewards_per_func.shape[0]
    if int(np.sum(budgets)) != t:
        raise ValueError(f"budgets sum to {int(np.sum(budgets))} but there are {t} reward rows.")
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)  # (1, F)
    unscorable = torch.isnan(rewards_per_func).all(dim=1)  # (T,)
    sizes = torch.as_tensor(np.asarray(budgets, dtype=np.int64), device=rewards_per_func.device)
    row = torch.repeat_interleave(torch.arange(sizes.numel(), device=sizes.device), sizes)  # (T,) group

    if multi_objective_aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights).nansum(dim=1)  # (T,)
        rewards[unscorable] = torch.nan
        grouped = padded_groups(rewards, budgets)  # (M, max B)
        mean = torch.nanmean(grouped, dim=1)[row]  # (T,)
        if scale_rewards in ("group", "none"):
            std = nanstd(grouped, dim=1)[row]
            std = torch.where(sizes[row] > 1, std, torch.zeros_like(std))
        else:  # batch
            std = nanstd(rewards).expand_as(rewards) if t > 1 else torch.zeros_like(rewards)
        advantages = rewards - mean
        if scale_rewards != "none":
            advantages = advantages / (std + _STD_EPS)
    else:  # normalize_then_sum
        grouped = padded_groups(rewards_per_func, budgets)  # (M, max B, F)
        mean_k = torch.nanmean(grouped, dim=1)[row]  # (T, F)
        std_k = nanstd(grouped, dim=1)[row]
        std_k = torch.where(sizes[row, None] > 1, std_k, torch.zeros_like(std_k))
        rewards = (((rewards_per_func - mean_k) / (std_k + _STD_EPS)) * weights).nansum(dim=1)  # (T,)
        rewards[unscorable] = torch.nan
        std = nanstd(rewards).expand_as(rewards) if t > 1 else torch.zeros_like(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + _STD_EPS)
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(advantages, nan=0.0), is_std_zero


def row_scores(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """(T,) TRL's weighted reward sum per row, NaN where every reward function left the row unscored.

    The rows behind TRL's logged ``reward`` (its ``nanmean``) and the tracker's scores.
    """
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)  # (1, F)
    scores = (rewards_per_func * weights).nansum(dim=1)  # (T,)
    scores[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return scores


def prompt_mean_score(scores: torch.Tensor, budgets: np.ndarray) -> float:
    """`coba_verl.core.allocator.prompt_mean_score` of the round's scored rows, prompt i's rows
    being the i-th B_i of the round.

    NaN is TRL's mark of a row no reward function scored (`row_scores`): such rows are left out,
    as the tracker never sees them, and a prompt with no scored row is left out with them. TRL's
    ``reward`` is the mean over rows, so under per-prompt budgets it weighs prompt i by B_i; this
    weighs every prompt once and equals TRL's ``reward`` when every B_i = G::

        scores [1, 1, 1, 1, 1, 1, 0, 0], B [6, 2]  ->  (1 + 0) / 2 = 0.5   (TRL's reward: 0.75)
    """
    values = scores.detach().double().cpu().numpy()  # (T,)
    prompt = group_index(budgets)  # (T,) position of each row's prompt
    scored = ~np.isnan(values)
    return core_prompt_mean_score(prompt[scored], values[scored])
