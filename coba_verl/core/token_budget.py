"""Budgets under a token budget: maximise sum_i V_i(B_i) s.t. sum_i B_i L_i <= C (docs/algorithm.md).

The rollout budget of spec §5 fixes sum_i B_i = M n. Rollouts of different prompts do not cost the
same: a prompt whose answers run to L_i tokens costs L_i per rollout to generate and to train. With
``coba.budget_unit=tokens`` the same value is maximised under

    sum_i B_i L_i <= C = n sum_i L_i,   B_low <= B_i <= B_up, B_i integer,

C being what uniform GRPO (n each) would spend on the same prompts at the same lengths.

Each V_i is concave, and a rollout of prompt i always weighs L_i, so prompt i's gains per token
dV_i(B) / L_i do not increase in B either. `solve_tokens` is the greedy on them: start every
prompt at B_low, repeatedly give a rollout to the prompt with the largest gain per token whose
rollout still fits, and drop a prompt for good once its rollout no longer fits (what is left only
shrinks). Guarantee: the linear relaxation (fractional rollouts allowed) is solved by the same
order, and the greedy keeps every rollout the relaxation takes before its one fractional item,
so

    OPT - greedy <= max_i dV_i(B_low)        (the largest single marginal gain)

where OPT is the integer optimum; greedy is exact when the capacity left at the end is below every
remaining rollout's length and the relaxation's critical item is whole (e.g. equal L_i and C a
multiple of L). Tested against exhaustive search in ``tests/core/test_token_budget.py``.
"""

from __future__ import annotations

import heapq

import numpy as np

from coba_verl.core.gains import GainModel


def check_lengths(lengths: np.ndarray, size: int, *, unknown: bool = False) -> np.ndarray:
    """(M,) float64 lengths, each finite and > 0; with ``unknown``, NaN too (a length never recorded).

    ValueError naming the first bad one: ``check_lengths([3.0, -4.0], 2)`` -> "length of prompt 1 is
    -4.0: ...". The rule of `check_pass_rates` (NaN allowed only as "unseen") and of
    `scores_to_successes` (a non-finite score is an error, never a failure).
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != (size,):
        raise ValueError(f"lengths must have shape ({size},), got {lengths.shape}.")
    bad = ~(np.isfinite(lengths) & (lengths > 0))
    if unknown:
        bad &= ~np.isnan(lengths)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        unknown_note = " (NaN marks an unknown one)" if unknown else ""
        raise ValueError(
            f"length of prompt {j} is {lengths[j]}: a mean response length is > 0 tokens{unknown_note}."
        )
    return lengths


def fill_lengths(lengths: np.ndarray) -> np.ndarray | None:
    """Unknown (NaN) lengths replaced by the mean of the known ones; None when none is known.

    NaN is how a missing length reads: `CapabilityTracker.mean_lengths` gives it to a prompt never
    observed (or observed with no length recorded), and `coba_verl.allocate` takes it for "unknown".
    Such a prompt costs what the batch's known prompts cost on average (docs/algorithm.md, "Token
    budget"), and a batch with none known is allocated by rollouts. Any other value is a measurement,
    and one that is no positive finite token count (0, negative, infinite) is refused by
    `check_lengths`, naming it, rather than replaced: a broken length must not pass for an average one.

    Raises:
        ValueError: a length that is neither NaN nor finite and > 0.
    """
    lengths = check_lengths(lengths, np.size(lengths), unknown=True)
    known = ~np.isnan(lengths)
    if not known.any():
        return None
    return np.where(known, lengths, float(lengths[known].mean()))


def solve_tokens(gains: GainModel, lengths: np.ndarray, capacity: float, low: int, up: int) -> np.ndarray:
    """Greedy on gain per token under sum_i B_i L_i <= capacity, low <= B_i <= up (module docstring).

    Args:
        gains: M concave value curves.
        lengths: (M,) L_i > 0, tokens per rollout of prompt i.
        capacity: C, tokens to spend; at least low * sum_i L_i.
        low, up: B_low, B_up.

    Returns:
        (M,) int64 budgets with sum_i B_i L_i <= capacity. Among equal gains per token the prompt
        with the lower position wins. O((M + S) log M) for S rollouts handed out above B_low.

    Raises:
        ValueError: bad lengths, or a capacity below low * sum_i L_i (B_low for every prompt does not fit).
    """
    m = gains.size
    lengths = check_lengths(lengths, m)
    if not 1 <= low <= up:
        raise ValueError(f"low={low}, up={up} must satisfy 1 <= low <= up.")
    floor = low * float(lengths.sum())
    if not capacity >= floor * (1 - 1e-12):
        raise ValueError(
            f"capacity={capacity} tokens is below B_low x sum_i L_i = {floor}: "
            f"even {low} rollouts each do not fit."
        )
    budget = [int(low)] * m
    left = float(capacity) - floor
    cost = lengths.tolist()
    heap = [(-gains.gain_one(i, low) / cost[i], i) for i in range(m)] if up > low else []
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        if cost[i] > left:
            continue  # never fits again: what is left only shrinks
        budget[i] += 1
        left -= cost[i]
        if budget[i] < up:
            heapq.heappush(heap, (-gains.gain_one(i, budget[i]) / cost[i], i))
    return np.asarray(budget, dtype=np.int64)
