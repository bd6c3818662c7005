"""`BudgetAllocator`: tracker + value function + optimiser, the object a trainer holds (spec §2-7, §9).

Per training step::

    res = allocator.allocate(ids, total)        # ids (M,) stable prompt ids -> res.budgets (M,)
    ...generate res.budgets[i] rollouts of prompt ids[i] and score them...
    allocator.observe(rollout_ids, scores)      # (R,) each; may be called several times
    step_metrics = allocator.end_step()         # commit; alpha/beta for the next step

Cold start, per strategy (spec §2, §9):
    * coba, coba_release, static, reverse: a batch in which no prompt has history is split
      uniformly (so the first epoch is plain GRPO); otherwise unseen prompts use
      ``unseen_pass_rate`` (0.5).
    * knapsack: unseen prompts get the uniform share total // M; the others share the rest by
      Knapsack-RL's rules (`coba_verl.core.knapsack`).
    * uniform: history is never used.

With ``skip_spread_below`` > 0 the budgets of any strategy but uniform (and of no cold start)
pass through GRESO's skip (`coba_verl.core.spread_skip`): B_i = 0 for a prompt unlikely to give a
reward spread, the round's total re-solved over the others.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coba_verl.core.config import CobaConfig
from coba_verl.core.knapsack import allocate_knapsack
from coba_verl.core.release import allocate_release
from coba_verl.core.solvers import check_budget, solve
from coba_verl.core.spread import uniform_split
from coba_verl.core.spread_skip import SkipRule, skip_unlikely_spread
from coba_verl.core.token_budget import fill_lengths, solve_tokens
from coba_verl.core.tracker import CapabilityTracker, _as_int_array, scores_to_successes
from coba_verl.core.values import CobaValue, no_spread_probability

logger = logging.getLogger(__name__)

METRIC_PREFIX = "coba/"


@dataclass
class Allocation:
    """Result of one allocation.

    Attributes:
        budgets: (M,) int64 rollouts per prompt; sum == total (``budget_unit=rollouts``) or
            sum_i b_i L_i <= total / M * sum_i L_i (``tokens``), min_rollouts <= b <= max_rollouts, or
            0 where ``skip_spread_below`` skipped the prompt (`coba_verl.core.spread_skip`).
        pass_rates: (M,) float64 p_hat from the tracker, NaN for prompts without history.
        lengths: (M,) float64 recent mean response tokens per rollout, NaN where unknown (or None).
        rollouts_per_prompt: total / M, the n of uniform GRPO on this batch (NaN: unknown).
        strategy: The strategy that produced ``budgets`` (``uniform`` on a cold start).
        alpha: Beta alpha used (NaN when no Beta was involved).
        beta: Beta beta used (NaN when no Beta was involved).
        tau: Saturation temperature used (NaN when none).
        elapsed_s: Wall time of the allocation.
        min_rollouts: B_low in force.
        max_rollouts: B_up in force.
    """

    budgets: np.ndarray
    pass_rates: np.ndarray
    strategy: str
    alpha: float = float("nan")
    beta: float = float("nan")
    tau: float = float("nan")
    elapsed_s: float = 0.0
    min_rollouts: int = 0
    max_rollouts: int = 0
    lengths: np.ndarray | None = None
    rollouts_per_prompt: float = float("nan")
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, float]:
        """Scalars under ``coba/``: budget statistics, Beta shape, tau, time, and the expected share of
        zero-variance groups (all pass or all fail) under these budgets versus uniform GRPO's n each
        (`uniform_split` of the budget total = n M, also under ``budget_unit=tokens``, where sum_i B_i
        varies), both from p_hat over the prompts with history: mean_i p_i^B_i + (1 - p_i)^B_i; where some
        prompt's length is known, the tokens these budgets are expected to generate, sum_i B_i L_i,
        and what n each would, n sum_i L_i (unknown L_i take the batch's mean of the known)."""
        b = self.budgets.astype(np.float64)
        out = {
            "budget_mean": float(b.mean()),
            "budget_std": float(b.std()),
            "budget_min": float(b.min()),
            "budget_max": float(b.max()),
            "at_min_rollouts": float(np.sum(self.budgets == self.min_rollouts)),
            "at_max_rollouts": float(np.sum(self.budgets == self.max_rollouts)),
            "alpha": self.alpha,
            "beta": self.beta,
            "tau": self.tau,
            "alloc_time_s": self.elapsed_s,
            "unseen_prompts": float(np.sum(np.isnan(self.pass_rates))),
            "skipped_prompts": float(np.sum(self.budgets == 0)),  # ``skip_spread_below``
        }
        seen = ~np.isnan(self.pass_rates)
        if seen.any():
            p = self.pass_rates[seen]
            uni = uniform_split(self.budgets.size, self._total())[seen].astype(np.float64)
            out["expected_zero_var_share"] = float(np.mean(no_spread_probability(p, b[seen])))
            out["expected_zero_var_share_uniform"] = float(np.mean(no_spread_probability(p, uni)))
        filled = fill_lengths(self.lengths) if self.lengths is not None else None
        if filled is not None:
            out["expected_tokens"] = float(np.sum(b * filled))
            out["expected_tokens_uniform"] = float(self.rollouts_per_prompt * filled.sum())
        out.update(self.extra)
        return {METRIC_PREFIX + k: v for k, v in out.items()}

    def _total(self) -> int:
        """The rollout budget total = n M of uniform GRPO on this batch (`rollouts_per_prompt` x M);
        sum_i B_i when ``rollouts_per_prompt`` is unknown (NaN), which it equals under a rollout budget."""
        if np.isnan(self.rollouts_per_prompt):
            return int(self.budgets.sum())
        return round(self.rollouts_per_prompt * self.budgets.size)


def allocate_from_rates(
    p_hat: np.ndarray,
    total: int,
    config: CobaConfig,
    *,
    shape: tuple[float, float],
    last_pass_rates: np.ndarray | None = None,
    lengths: np.ndarray | None = None,
) -> Allocation:
    """Dispatch on ``config.strategy`` given pass rates (M,) with NaN for unseen prompts.

    The caller checks the budget first, with the names its user knows (`check_budget`:
    `BudgetAllocator.allocate`, `coba_verl.allocate`); the strategies check it again (a few
    comparisons), so that a refusal names the caller's settings.

    Args:
        p_hat: (M,) windowed pass rates, NaN = no history.
        total: rollouts to hand out, feasible for M prompts within the config's bounds.
        config: strategy, bounds, value knobs.
        shape: (alpha, beta) of the tracker for coba/coba_release/reverse; ignored by static
            (which uses ``config.static_alpha/beta``), uniform and knapsack.
        last_pass_rates: (M,) rates at the last appearance for ``knapsack`` (defaults to p_hat).
        lengths: (M,) recent mean response lengths, NaN where unknown; under
            ``budget_unit=tokens`` the budgets satisfy sum_i B_i L_i <= total / M * sum_i L_i
            (`coba_verl.core.token_budget`), unknown L_i taking the mean of the known ones.
    """
    cfg = config
    p_hat = np.asarray(p_hat, dtype=np.float64)
    m = p_hat.size
    low, up = cfg.min_rollouts, cfg.max_rollouts
    seen = ~np.isnan(p_hat)
    result = Allocation(
        budgets=uniform_split(m, total),
        pass_rates=p_hat,
        strategy="uniform",
        min_rollouts=low,
        max_rollouts=up,
        lengths=None if lengths is None else np.asarray(lengths, dtype=np.float64),
        rollouts_per_prompt=total / m,
    )
    filled = fill_lengths(lengths) if cfg.budget_unit == "tokens" and lengths is not None else None
    if cfg.strategy == "uniform":
        pass
    elif cfg.strategy == "knapsack":
        last = p_hat if last_pass_rates is None else np.asarray(last_pass_rates, dtype=np.float64)
        result.budgets = allocate_knapsack(last, total, low, up, solver=cfg.solver)
        result.strategy = "knapsack"
    elif not seen.any():
        result.extra["cold_start"] = 1.0  # no history in the batch: plain GRPO (spec §2)
    else:
        alpha, beta = (cfg.static_alpha, cfg.static_beta) if cfg.strategy == "static" else shape
        p = np.where(seen, p_hat, cfg.unseen_pass_rate)
        value = CobaValue(alpha, beta, tau=cfg.tau, p_low=cfg.p_clip_low, p_high=cfg.p_clip_high)
        if cfg.strategy == "coba_release":
            result.budgets, info = allocate_release(p, total, low, up, value, solver=cfg.solver)
            result.extra.update(info)
        elif filled is not None:
            capacity = total / m * float(filled.sum())  # what n each would spend
            result.budgets = solve_tokens(value.gains(p), filled, capacity, low, up)
            result.extra["token_budget"] = capacity
        else:
            result.budgets = solve(value.gains(p), total, low, up, solver=cfg.solver)
        result.strategy = cfg.strategy
        result.alpha, result.beta, result.tau = alpha, beta, value.last_tau
    if "token_budget" not in result.extra and int(result.budgets.sum()) != int(total):
        raise RuntimeError(f"allocation spent {int(result.budgets.sum())} rollouts, not the budget {total}")
    return result


def prompt_mean_score(ids: Any, scores: Any) -> float:
    """Mean over the distinct prompts of each prompt's mean score: (1 / P) sum_p mean{s_r : id_r = p}.

    Unlike a mean over rollouts (veRL's ``critic/score/mean``, TRL's ``reward``), every prompt
    weighs the same whatever its budget B_i, so it compares across strategies; it equals the mean
    over rollouts when every prompt has the same number of scores. The ``coba/prompt_mean_score``
    of every trainer: ids [3, 3, 3, 8], scores [1, 1, 1, 0] -> (1 + 0) / 2 = 0.5 (rollout mean 0.75).

    Args:
        ids: (R,) integer prompt key of each scored rollout.
        scores: (R,) each rollout's score; NaN when R = 0.

    Raises:
        ValueError: ids and scores of different lengths, or a score that is not finite (the
            tracker's rule, `scores_to_successes`, naming its position).
    """
    ids_a = _as_int_array("ids", ids)
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != ids_a.shape:
        raise ValueError(f"ids {ids_a.shape} and scores {s.shape} must have the same length.")
    if not s.size:
        return float("nan")
    scores_to_successes(s)  # refuses a score that is not finite, naming its position
    _, inv = np.unique(ids_a, return_inverse=True)  # (R,) prompt of each rollout, 0..P-1
    means = np.bincount(inv, weights=s) / np.bincount(inv)  # (P,) each prompt's mean score
    return float(means.mean())


class BudgetAllocator:
    """Per-prompt rollout budgets from a `CapabilityTracker` and the configured strategy.

    Args:
        config: The allocation knobs (`CobaConfig`).
        num_prompts: Size of the prompt id space (ids in [0, num_prompts)), e.g. the training set.

    Raises:
        ValueError: from :meth:`allocate` when the budget is infeasible for the batch, ids are
            out of range, or inputs are malformed; the message names the values.
    """

    def __init__(self, config: CobaConfig, num_prompts: int) -> None:
        self.config = config
        self.tracker = CapabilityTracker(num_prompts, window=config.window, kappa=config.kappa)
        self._step_scores: list[tuple[np.ndarray, np.ndarray]] = []  # this step's (ids, raw scores)
        self._rounds = 0  # `allocate` calls so far: seeds the skip's exploration draws

    # ------------------------------------------------------------------ allocation
    def allocate(self, ids: Any, total: int) -> Allocation:
        """Budgets for the prompts ``ids`` (M,) summing to ``total``."""
        start = time.perf_counter()
        ids_a = _as_int_array("ids", ids)
        strategy = self.config.strategy
        p_hat = self.tracker.pass_rates(ids_a)
        shape = self.tracker.shape(reverse=strategy == "reverse")
        last = self.tracker.last_pass_rates(ids_a) if strategy == "knapsack" else None
        lengths = self.tracker.mean_lengths(ids_a)
        check_budget(p_hat.size, total, self.config.min_rollouts, self.config.max_rollouts)
        result = allocate_from_rates(
            p_hat, total, self.config, shape=shape, last_pass_rates=last, lengths=lengths
        )
        if self.config.skip_spread_below > 0 and result.strategy != "uniform":

            def resolve(kept: np.ndarray) -> np.ndarray:
                part = allocate_from_rates(
                    p_hat[kept], total, self.config, shape=shape,
                    last_pass_rates=None if last is None else last[kept],
                    lengths=None if lengths is None else lengths[kept],
                )  # fmt: skip
                return np.asarray(part.budgets, np.int64)

            successes, attempts = self.tracker.window_counts(ids_a)
            result.budgets, _ = skip_unlikely_spread(
                ids_a, result.budgets, successes, attempts,
                SkipRule(self.config.skip_spread_below, self.config.skip_explore), resolve,
                up=self.config.max_rollouts, round_key=self._rounds,
            )  # fmt: skip
        self._rounds += 1
        result.elapsed_s = time.perf_counter() - start
        return result

    # ------------------------------------------------------------------ feedback
    def observe(self, rollout_ids: Any, scores: Any, lengths: Any = None, versions: Any = None) -> None:
        """Record rollout scores (R,) of prompts ``rollout_ids`` (R,); success iff score == success_value.

        ``lengths`` (R,): each rollout's response tokens, for the token budget and the cost metrics.
        ``versions`` (R,) or one int: the policy version that generated each rollout, where generation
        runs ahead of the update; F_bar then follows generating versions (`CapabilityTracker`).
        None: each rollout is of the step that commits it.
        """
        self.tracker.record_scores(rollout_ids, scores, self.config.success_value, versions)
        if lengths is not None:
            self.tracker.record_lengths(rollout_ids, lengths)
        ids = _as_int_array("rollout_ids", rollout_ids)
        if ids.size:
            self._step_scores.append((ids, np.asarray(scores, np.float64).reshape(-1)))

    def record(self, ids: Any, successes: Any, rollouts: Any) -> None:
        """Record prompt-level (successes, rollouts) for this step."""
        self.tracker.record(ids, successes, rollouts)

    def end_step(self) -> dict[str, float]:
        """Commit the step into the tracker; returns ``coba/``-prefixed statistics of the step.

        Besides the tracker's statistics, ``prompt_mean_score`` (`prompt_mean_score`) of the
        rollouts passed to `observe` this step.
        """
        stats = self.tracker.end_step()
        renamed = {"alpha": "alpha_next", "beta": "beta_next"}
        out = {METRIC_PREFIX + renamed.get(k, k): v for k, v in stats.items()}
        if self._step_scores:
            ids = np.concatenate([i for i, _ in self._step_scores])
            scores = np.concatenate([s for _, s in self._step_scores])
            out[METRIC_PREFIX + "prompt_mean_score"] = prompt_mean_score(ids, scores)
        self._step_scores = []
        return out

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Tracker state, the strategy name and this step's raw scores so far (plain arrays and
        numbers): like the tracker's pending step, a checkpoint inside a step keeps them."""
        ids = [i for i, _ in self._step_scores]
        scores = [s for _, s in self._step_scores]
        return {
            "strategy": self.config.strategy,
            "rounds": self._rounds,
            "tracker": self.tracker.state_dict(),
            "step_scores": {
                "ids": np.concatenate(ids) if ids else np.zeros(0, np.int64),
                "scores": np.concatenate(scores) if scores else np.zeros(0, np.float64),
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("strategy") != self.config.strategy:
            logger.warning(
                "resuming allocator state saved with strategy=%s under strategy=%s",
                state.get("strategy"),
                self.config.strategy,
            )
        self.tracker.load_state_dict(state["tracker"])
        self._rounds = int(state.get("rounds", 0))  # 0.1.0 checkpoints: no skip ran before
        saved = state["step_scores"]
        ids = np.asarray(saved["ids"], np.int64)
        self._step_scores = [(ids, np.asarray(saved["scores"], np.float64))] if ids.size else []
