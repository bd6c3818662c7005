"""The ``coba/...`` metrics of a training step, which each trainer hands to its framework's logger.

Every value is a finite scalar, so that every logging backend (console, file, tensorboard,
wandb, mlflow, ...) accepts it; the budget histogram is therefore logged as counts per bin.

Per step (names after the ``coba/`` prefix):
    budget_mean, budget_std, budget_min, budget_max   B_i over the step's prompts
    budget_hist/<lo>-<hi>                             prompts with lo <= B_i <= hi (power-of-two bins)
    at_min_rollouts, at_max_rollouts                  prompts at B_low / B_up
    alpha, beta, tau                                  Beta shape and saturation temperature used
    unseen_prompts                                    prompts without history (p_i = unseen_pass_rate)
    expected_zero_var_share[_uniform]                 mean_i p_i^B_i + (1 - p_i)^B_i under these
                                                      budgets / under rollout.n each (prompts with history)
    alloc_time_s                                      wall time of the allocation
    F_t, F_bar, F_tilde, alpha_next, beta_next        tracker after this step (spec §3)
    F_open_versions                                   policy versions with groups in flight, left
                                                      out of F_bar (`CapabilityTracker.hold_open`)
    all_pass_share, all_fail_share                    observed zero-variance groups of this step
    prompt_mean_score                                 mean over prompts of each prompt's mean score
    expected_tokens[_uniform]                         sum_i B_i L_i / n sum_i L_i from the prompts'
                                                      recent mean lengths L_i (where any is known)
    token_budget                                      C of ``budget_unit=tokens``

The veRL trainer adds what the step generated and trained (docs/verl.md, "What a step costs"):
    rollouts_generated, tokens_generated              sessions submitted / response tokens observed
    trained_groups, trained_rollouts, trained_rows    groups, sessions and rows of the update
    tokens_trained, padding_rows, optimizer_steps     response tokens of those rows, veRL's padding
                                                      rows, mini-batches x ppo_epochs
    evicted_groups, evicted_rollouts, cut_rollouts, failed_rollouts   generated, not trained
    in_flight_rollouts                                submitted, no fate yet (async trainers)
    trimmed_rollouts                                  allocated, never generated: cut from the budgets
                                                      of this step's submissions (``size_refills``)
    versions_behind_mean/_max, evicted_budget_mean    staleness of what was trained; B_i evicted
    F_bar_newest_version                              the newest policy version F_bar averages
    versions_held_open                                versions F_bar waits for (bounded by staleness)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from coba_verl.core.allocator import METRIC_PREFIX as PREFIX
from coba_verl.core.allocator import Allocation


def histogram_edges(low: int, up: int) -> list[int]:
    """Bin edges low, powers of two in (low, up], up + 1: (2, 128) -> [2, 4, 8, 16, 32, 64, 128, 129]."""
    edges = [low]
    power = 1
    while power <= up:
        if power > low:
            edges.append(power)
        power *= 2
    edges.append(up + 1)
    return edges


def budget_histogram(budgets: np.ndarray, low: int, up: int) -> dict[str, float]:
    """``coba/budget_hist/<lo>-<hi>``: number of prompts with lo <= B_i <= hi, bins from `histogram_edges`."""
    edges = histogram_edges(low, up)
    counts, _ = np.histogram(budgets, bins=edges)  # bins [e_k, e_{k+1}), the last one closed
    return {
        f"{PREFIX}budget_hist/{lo}-{hi - 1}": float(c)
        for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)
    }


def merge_allocations(allocations: list[Allocation]) -> Allocation:
    """One `Allocation` for a step that submitted several batches: budgets and p_hat concatenated,
    times summed, the last batch's alpha / beta / tau."""
    if len(allocations) == 1:
        return allocations[0]
    last = allocations[-1]
    return dataclasses.replace(
        last,
        budgets=np.concatenate([a.budgets for a in allocations]),
        pass_rates=np.concatenate([a.pass_rates for a in allocations]),
        lengths=None
        if any(a.lengths is None for a in allocations)
        else np.concatenate([a.lengths for a in allocations]),
        elapsed_s=sum(a.elapsed_s for a in allocations),
    )


def step_metrics(allocation: Allocation, tracker_metrics: dict[str, float]) -> dict[str, float]:
    """All ``coba/`` scalars of a step; non-finite values (e.g. alpha under ``uniform``) are left out."""
    out = dict(allocation.metrics)
    out.update(budget_histogram(allocation.budgets, allocation.min_rollouts, allocation.max_rollouts))
    out.update(tracker_metrics)
    return {k: float(v) for k, v in out.items() if math.isfinite(float(v))}
