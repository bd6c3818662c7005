"""What a GRPO step will cost before a run: budgets, groups without a reward spread, and under DAPO
dynamic sampling the rollouts generated per rollout trained (`coba-verl plan`, docs/plan.md).

Notation: K prompts in the population (a prior file's records), M prompts a round, n rollouts a
prompt under uniform GRPO, budgets B_i in [B_low, B_up] with sum_i B_i = M n per round, p_i a
prompt's pass rate, L_i its mean answer length in tokens.

* A group of B rollouts of a prompt with pass rate p has **no reward spread** with probability
  q(p, B) = p^B + (1 - p)^B (all pass or all fail; `coba_verl.core.values.no_spread_probability`,
  also the allocator's ``expected_zero_var_share``). When p is not known but has a Beta(a, b) law,
  E[q] = prod_{j<B} (a + j)/(a + b + j) + prod_{j<B} (b + j)/(a + b + j)
  (`expected_no_spread`, the Beta moments E[p^B] and E[(1 - p)^B]).
* **Without DAPO** every generated rollout is trained: generated per trained = 1 exactly, and the
  share of groups without spread is mean_i q(p_i, B_i) over a round's prompts.
* **With DAPO** (``algorithm.filter_groups``, veRL's V1 sync trainer with this package's replay
  buffer; the lab's `coba_verl.lab.dapo` is the same model): a step submits M prompts, the next of the
  current round (a round of M prompts is allocated when its first prompt is drawn, its rest waits for
  the next submission, even in the next step). A group without spread is evicted; each evicted group
  adds 2 prompts of refill credit, at most M prompts go out per wave, and with no credit left
  ceil(missing / n) prompts are refilled. Once the ready groups hold T = M n rollouts,
  `coba_verl.core.trained_budget.select_to_budget` trains exactly T: whole groups oldest first, one
  (rarely two) cut to the rest; the cut sessions and the surplus groups are generated, not trained.
  For uniform budgets that is veRL's own rule, the first M ready groups. No closed form covers the
  waves, the cut and the surplus: generated per trained is a seeded Monte Carlo, sum of generated over
  sum of trained rollouts in ``draws`` runs of ``steps`` steps (tokens: sum_i B_i L_i likewise).

Budgets come from the core's own `BudgetAllocator`, its tracker seeded with the population's counts
as the trainer seeds it from ``coba.prior_file`` (`CapabilityTracker.set_prior`: p_hat_i = s_i / a_i,
F_bar = 1 - mean_i p_hat_i, alpha, beta from F_bar, spec §2-3), and fed every simulated rollout
(evicted, cut, surplus and trained, as veRL's buffer shows them), so over ``steps`` > 1 the tracker
learns as in a run. The policy does not learn: each prompt's true pass rate is fixed for a run.

Truth: ``estimate`` takes s_i / a_i as a prompt's true pass rate; ``posterior`` draws it once a run
from Beta(A + s_i, B + a_i - s_i), Beta(A, B) fitted to the population's counts by maximum likelihood
(`beta_binomial_fit`, empirical Bayes): a prompt that failed 8 of 8 is not certain to fail 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coba_verl.core.allocator import BudgetAllocator
from coba_verl.core.beta_binomial import beta_binomial_fit
from coba_verl.core.capability import capability_shape
from coba_verl.core.config import CobaConfig, check_int, invalid_pass_rates
from coba_verl.core.metrics import histogram_edges
from coba_verl.core.trained_budget import select_to_budget
from coba_verl.core.values import expected_no_spread, no_spread_probability
from coba_verl.core.wave_sizing import size_submission
from coba_verl.refusal import CobaRefusal

__all__ = [
    "EXACT_ATTEMPTS",
    "MAX_ROUNDS_PER_STEP",
    "TRUTHS",
    "Population",
    "StepCost",
    "beta_binomial_fit",
    "plan_step_cost",
]

#: ``estimate``: the pass rates are the prompts' own; ``posterior``: drawn around the counts.
TRUTHS: tuple[str, ...] = ("estimate", "posterior")
#: Attempts a pass rate known exactly (given inline, not counted) seeds the tracker with.
EXACT_ATTEMPTS = 10**6
#: A DAPO step that has not filled M x n trained rollouts after this many x M prompts is refused.
MAX_ROUNDS_PER_STEP = 1000


@dataclass(frozen=True)
class Population:
    """The prompts a run draws from: K prompts' counts and, optionally, answer lengths.

    Attributes:
        successes, attempts: (K,) int64 counts, the tracker's prior records (s_i of a_i).
        lengths: (K,) float64 mean answer tokens per prompt, or None (tokens not counted).
        exact: the pass rates are known, not counted (given inline: ``truth='posterior'`` is refused).
        source: where the prompts come from, for the table.
    """

    successes: np.ndarray
    attempts: np.ndarray
    lengths: np.ndarray | None = None
    exact: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        x = self.lengths  # (K,) or None
        if x is not None and not (x.shape == (self.size,) and 0 < x.min() <= x.max() < np.inf):
            raise CobaRefusal(
                f"{x.size} answer lengths (min {x.min()}) for {self.size} prompts: give one per prompt, "
                "each a positive number of tokens."
            )

    @classmethod
    def from_rates(cls, pass_rates: Any, lengths: np.ndarray | None = None, source: str = "") -> Population:
        """Known pass rates, as `EXACT_ATTEMPTS` attempts each (kept to 5e-7).

        Raises:
            CobaRefusal: a pass rate outside [0, 1] (naming its position and value), none given.
        """
        p = np.asarray(pass_rates, dtype=np.float64).reshape(-1)
        if p.size == 0:
            raise CobaRefusal("pass rates: none given; give at least M of them.")
        bad = invalid_pass_rates(p)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise CobaRefusal(f"pass rate {float(p[j])!r} (position {j}) lies outside [0, 1].")
        counts = np.rint(p * EXACT_ATTEMPTS).astype(np.int64)
        lengths = None if lengths is None else np.asarray(lengths, dtype=np.float64)
        return cls(counts, np.full(p.size, EXACT_ATTEMPTS, dtype=np.int64), lengths, True, source)

    @property
    def size(self) -> int:
        return int(self.attempts.size)

    @property
    def estimates(self) -> np.ndarray:
        """(K,) s_i / a_i."""
        return self.successes / self.attempts


@dataclass
class StepCost:
    """The expected cost of one step under one strategy (means over the simulated steps).

    Attributes:
        strategy: the allocation strategy.
        histogram: mean prompts of a round per budget bin, ``"lo-hi"`` -> count (bins of
            `coba_verl.core.metrics.histogram_edges`).
        no_spread_share: expected share of groups without a reward spread, mean_i q(p_i, B_i).
        generated_per_trained: rollouts generated per rollout trained (1 without DAPO).
        tokens_per_trained_token: answer tokens generated per token trained (NaN without lengths).
        generated_per_step, prompts_per_step, tokens_per_step: rollouts, prompts and answer tokens
            generated in a step (tokens NaN without lengths).
        short_steps: simulated steps that trained fewer than M n (no choice of whole and cut groups
            made it exactly).
        alpha, beta: the Beta of the first allocation (NaN for uniform and knapsack).
        exact: the share and the ratio are closed forms (uniform budgets, no DAPO for the ratio).
    """

    strategy: str
    histogram: dict[str, float] = field(default_factory=dict)
    no_spread_share: float = float("nan")
    generated_per_trained: float = float("nan")
    tokens_per_trained_token: float = float("nan")
    generated_per_step: float = float("nan")
    prompts_per_step: float = float("nan")
    tokens_per_step: float = float("nan")
    short_steps: int = 0
    alpha: float = float("nan")
    beta: float = float("nan")
    exact: bool = False


class _Run:
    """One simulated run: the allocator and its tracker, the prompt order, the true pass rates."""

    def __init__(
        self, pop: Population, config: CobaConfig, m: int, n: int, posterior: Any, seed: Any
    ) -> None:
        order_seed, truth_seed, outcome_seed = seed.spawn(3)  # posterior: (K,) a, b of each prompt, or None
        self.pop, self.m, self.n = pop, m, n
        self.allocator = BudgetAllocator(config, pop.size)
        self.allocator.tracker.set_prior(np.arange(pop.size), pop.successes, pop.attempts)
        self.order_rng = np.random.default_rng(order_seed)
        self.outcome_rng = np.random.default_rng(outcome_seed)
        truth = np.random.default_rng(truth_seed)
        self.p = pop.estimates if posterior is None else truth.beta(*posterior)  # (K,) fixed for the run
        self.lengths = pop.lengths if pop.lengths is not None else np.ones(pop.size)
        self._order = np.zeros(0, np.int64)
        self._ids = np.zeros(0, np.int64)  # the current round's prompts not yet submitted
        self._budgets = np.zeros(0, np.int64)
        self.rounds: list[np.ndarray] = []  # (M,) budgets of each round allocated
        self.no_spread = 0.0  # sum over allocated prompts of q(p_i, B_i)
        self.first: tuple[float, float] = (float("nan"), float("nan"))  # Beta of the first round

    def _next_round(self) -> None:
        while self._order.size < self.m:  # epochs of a seeded shuffle, as a data loader draws them
            self._order = np.concatenate([self._order, self.order_rng.permutation(self.pop.size)])
        ids, self._order = self._order[: self.m], self._order[self.m :]
        res = self.allocator.allocate(ids, self.m * self.n)
        budgets = np.asarray(res.budgets, dtype=np.int64)
        if len(self.rounds) == 0:
            self.first = (res.alpha, res.beta)
        self.rounds.append(budgets)
        drawn = budgets > 0  # a prompt skipped (B_i = 0) is not generated
        self.no_spread += float(no_spread_probability(self.p[ids[drawn]], budgets[drawn]).sum())
        self._ids, self._budgets = ids, budgets

    def take(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` prompts and their budgets, rounds allocated as they are reached."""
        ids, budgets = [], []
        while k > 0:
            if self._ids.size == 0:
                self._next_round()
            j = min(k, self._ids.size)
            ids.append(self._ids[:j])
            budgets.append(self._budgets[:j])
            self._ids, self._budgets, k = self._ids[j:], self._budgets[j:], k - j
        return np.concatenate(ids), np.concatenate(budgets)

    def put_back(self, ids: np.ndarray, budgets: np.ndarray) -> None:
        """Prompts `take` gave but a sized wave did not submit: the first of the next `take`."""
        self._ids = np.concatenate([ids, self._ids])
        self._budgets = np.concatenate([budgets, self._budgets])

    def generate(self, ids: np.ndarray, budgets: np.ndarray) -> np.ndarray:
        """(k,) successes of each group, every rollout shown to the tracker: [2, 3] rollouts with
        [1, 0] successes -> prompt ids [a, a, b, b, b], scores [1, 0, 0, 0, 0]."""
        successes = self.outcome_rng.binomial(budgets, self.p[ids])
        starts = np.repeat(np.cumsum(budgets) - budgets, budgets)  # (R,) first row of each row's group
        scores = (np.arange(int(budgets.sum())) - starts < np.repeat(successes, budgets)).astype(np.float64)
        self.allocator.observe(np.repeat(ids, budgets), scores)
        return successes


def _dapo_step(
    run: _Run, n: int, min_size: int, size: bool = False
) -> tuple[int, int, float, float, int, int]:
    """One DAPO step (module docstring): (generated, trained, tokens generated, tokens trained,
    prompts submitted, 1 if it trained short of M n). With ``size`` (``coba.size_refills``) each wave
    is sized to the rollouts still missing (`coba_verl.core.wave_sizing.size_submission`), the
    prompts beyond going back to the front of the run's round."""
    m, target = run.m, run.m * n
    ready_sizes, ready_lengths = [], []  # of the groups with a spread, in submission order
    generated, tokens, prompts, drawn, credit, pending = 0, 0.0, 0, 0, 0, m
    while True:
        ids, budgets = run.take(pending)
        drawn += ids.size
        kept = budgets > 0  # skipped prompts (``skip_spread_below``) are drawn, not generated
        ids, budgets = ids[kept], budgets[kept]
        if size:
            sized = size_submission(budgets, target - sum(ready_sizes), min_size)
            k = sized.prompts
            run.put_back(ids[k:], budgets[k:])
            drawn -= ids.size - k
            ids, budgets = ids[:k], np.asarray(sized.budgets, dtype=np.int64)
        prompts += ids.size
        successes = run.generate(ids, budgets)
        spread = (successes > 0) & (successes < budgets)  # DAPO's filter: rewards not all equal
        generated += int(budgets.sum())
        tokens += float(np.sum(budgets * run.lengths[ids]))
        ready_sizes += budgets[spread].tolist()
        ready_lengths += run.lengths[ids[spread]].tolist()
        have = sum(ready_sizes)
        if have >= target:
            break
        if drawn >= MAX_ROUNDS_PER_STEP * m:
            raise CobaRefusal(
                f"dapo: a step did not fill {target} trained rollouts within {MAX_ROUNDS_PER_STEP} rounds "
                f"of {m} prompts: almost no group shows a reward spread at these pass rates."
            )
        credit += 2 * int((~spread).sum())  # veRL: evict k groups, refill 2k prompts
        if credit == 0:  # nothing evicted, the ready groups are small: refill what is missing
            credit = math.ceil((target - have) / n)
        pending = min(credit, m)
        credit -= pending
    choice = select_to_budget(ready_sizes, target, min_size)
    trained_tokens = sum(ready_sizes[i] * ready_lengths[i] for i in choice.whole)
    trained_tokens += sum(keep * ready_lengths[i] for i, keep in choice.cuts)
    return generated, target - choice.shortfall, tokens, trained_tokens, prompts, int(choice.shortfall > 0)


def posterior_shapes(pop: Population) -> tuple[np.ndarray, np.ndarray]:
    """(K,) (A + s_i, B + a_i - s_i): each prompt's Beta posterior under the fitted population Beta."""
    a, b = beta_binomial_fit(pop.successes, pop.attempts)
    return a + pop.successes, b + pop.attempts - pop.successes


class _PlanConfig(CobaConfig):
    """`CobaConfig` whose messages name `plan_step_cost`'s arguments, not the ``coba.*`` keys."""

    _caller_depth = 4

    def _name(self, field: str) -> str:
        return field


def _check(pop: Population, m: int, n: int, config: CobaConfig, runs: int, truth: str) -> None:
    """The refusals of `plan_step_cost`, each naming the bad value."""
    low, up = config.min_rollouts, config.max_rollouts
    if m < 1:
        raise CobaRefusal(f"prompts={m} must be >= 1: M, the prompts of a step (data.train_batch_size).")
    if not low <= n <= up:
        raise CobaRefusal(f"n={n} lies outside [min_rollouts={low}, max_rollouts={up}]: no budget fits.")
    if pop.size < m:
        raise CobaRefusal(f"{pop.size} prompts given for prompts={m} a step: give at least M pass rates.")
    if runs < 1:
        raise CobaRefusal(f"steps x draws = {runs} must be >= 1.")
    if truth not in TRUTHS:
        raise CobaRefusal(f"truth={truth!r} is unknown; choose one of {TRUTHS}.")
    if truth == "posterior" and pop.exact:
        raise CobaRefusal(
            "truth='posterior' needs counts (a prior file's successes and attempts); pass rates given "
            "inline are known exactly: use truth='estimate'."
        )


def _config(strategy: str, low: int, up: int, failure_rate: float | None, skip: float = 0.0) -> CobaConfig:
    """The allocator's config; a failure rate fixes the Beta (the ``static`` strategy at its shape);
    ``skip`` is ``skip_spread_below`` (GRESO's skip, `coba_verl.core.spread_skip`)."""
    if failure_rate is None:
        return _PlanConfig(strategy=strategy, min_rollouts=low, max_rollouts=up, skip_spread_below=skip)
    if strategy not in ("coba", "reverse"):
        raise CobaRefusal(
            f"failure_rate={failure_rate} fixes the Beta of coba or reverse; strategy={strategy!r} has none."
        )
    if not 0.0 <= float(failure_rate) <= 1.0:
        raise CobaRefusal(f"failure_rate={failure_rate} is not a failure rate in [0, 1].")
    alpha, beta = capability_shape(float(failure_rate), CobaConfig.kappa, reverse=strategy == "reverse")
    return _PlanConfig(
        strategy="static", min_rollouts=low, max_rollouts=up, static_alpha=alpha, static_beta=beta,
        skip_spread_below=skip,
    )  # fmt: skip


def plan_step_cost(
    pop: Population,
    *,
    prompts: int,
    n: int,
    strategy: str = CobaConfig.strategy,
    min_rollouts: int = CobaConfig.min_rollouts,
    max_rollouts: int = CobaConfig.max_rollouts,
    dapo: bool = False,
    steps: int = 1,
    draws: int = 200,
    seed: int = 0,
    truth: str = "estimate",
    failure_rate: float | None = None,
    skip_spread_below: float = 0.0,
    size_refills: bool = False,
) -> StepCost:
    """The expected cost of a step of M = ``prompts`` prompts and M n rollouts under ``strategy``.

    Args:
        pop: the prompts a run draws from (`Population`).
        prompts, n: M and n (``data.train_batch_size``, ``actor_rollout_ref.rollout.n``).
        strategy, min_rollouts, max_rollouts: as `CobaConfig` (B_low, B_up).
        dapo: DAPO dynamic sampling (module docstring) or not (every rollout trained).
        steps: consecutive steps of a run, the tracker learning from each (1: the first step).
        draws: simulated runs, seeded from ``seed``: the same seed gives the same numbers, and two
            strategies planned with one seed see the same prompt orders and true pass rates.
        truth: ``estimate`` or ``posterior`` (module docstring).
        failure_rate: F_bar fixing the Beta for every step (coba and reverse only); None: the
            tracker's, from the counts and then the simulated rollouts, as in a run.
        skip_spread_below: GRESO's skip (``coba.skip_spread_below``; DAPO only): a skipped prompt is
            drawn but not generated, and the histogram counts its budget of 0 in a bin of its own.
        size_refills: C-size (``coba.size_refills``; DAPO only): each wave sized to the rollouts
            still missing, so no surplus group is generated.

    Returns:
        The `StepCost`. For uniform budgets the share without spread is the closed form
        mean_i q(p_i, n) (its Beta expectation under ``posterior``) and without DAPO the ratios are
        1 exactly; the rest are means over the ``draws`` x ``steps`` simulated steps.

    Raises:
        CobaRefusal: one line naming the bad value: M < 1, n outside [B_low, B_up], fewer prompts
            than M, an unknown strategy or truth, bad bounds (`CobaConfig`'s checks), a failure rate
            outside [0, 1] or under a strategy without a Beta, a DAPO step that cannot fill.
    """
    m, n = check_int("prompts", prompts), check_int("n", n)
    steps, draws = check_int("steps", steps), check_int("draws", draws)
    config = _config(strategy, min_rollouts, max_rollouts, failure_rate, skip_spread_below)
    _check(pop, m, n, config, min(steps, draws), truth)
    if config.skip_spread_below > 0 and not dapo:
        raise CobaRefusal(
            f"skip_spread_below={config.skip_spread_below} needs dapo: a skipped prompt gets no rollouts, "
            "which only DAPO dynamic sampling fills (veRL refuses it otherwise too)."
        )
    if size_refills and not dapo:
        raise CobaRefusal("size_refills needs dapo: without DAPO every step generates exactly M n.")
    posterior = posterior_shapes(pop) if truth == "posterior" else None
    if dapo and posterior is None and not np.any((pop.estimates > 0) & (pop.estimates < 1)):
        raise CobaRefusal(
            "dapo: every pass rate is 0 or 1, so every group is without a reward spread and DAPO never "
            "fills a step."
        )
    lengths = pop.lengths if pop.lengths is not None else np.ones(pop.size)
    total = np.zeros(6)  # generated, trained, tokens generated, tokens trained, prompts, short steps
    runs = [_Run(pop, config, m, n, posterior, s) for s in np.random.SeedSequence(seed).spawn(draws)]
    for run in runs:
        for _ in range(steps):
            if dapo:
                total += _dapo_step(run, n, config.min_rollouts, size_refills)
            else:  # one round, every rollout trained
                ids, budgets = run.take(m)
                run.generate(ids, budgets)
                tok = float(np.sum(budgets * lengths[ids]))
                total += (budgets.sum(), budgets.sum(), tok, tok, m, 0)
            run.allocator.end_step()
    generated, trained, tokens, trained_tokens, prompts_total, short = total.tolist()
    budgets = np.concatenate([np.concatenate(r.rounds) for r in runs])  # (rounds x M,)
    edges = histogram_edges(config.min_rollouts, config.max_rollouts)
    counts, _ = np.histogram(budgets, bins=edges)
    labels = [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:], strict=False)]
    if config.skip_spread_below > 0:
        counts, labels = np.r_[np.sum(budgets == 0), counts], ["0 (skipped)", *labels]
    per_step = draws * steps
    has_lengths = pop.lengths is not None
    cost = StepCost(
        strategy=strategy,
        histogram=dict(zip(labels, (counts * m / budgets.size).tolist(), strict=True)),
        no_spread_share=sum(r.no_spread for r in runs) / max(1, int(np.sum(budgets > 0))),
        generated_per_trained=generated / trained,
        tokens_per_trained_token=tokens / trained_tokens if has_lengths else float("nan"),
        generated_per_step=generated / per_step,
        prompts_per_step=prompts_total / per_step,
        tokens_per_step=tokens / per_step if has_lengths else float("nan"),
        short_steps=int(short),
    )
    cost.alpha, cost.beta = runs[0].first
    if config.strategy == "uniform":  # closed forms: every prompt gets n
        cost.exact = not dapo
        exact = no_spread_probability(pop.estimates, n) if posterior is None else None
        cost.no_spread_share = float(np.mean(expected_no_spread(*posterior, n) if exact is None else exact))
        if not dapo:
            cost.generated_per_trained, cost.prompts_per_step, cost.generated_per_step = 1.0, m, m * n
            if has_lengths:
                cost.tokens_per_trained_token, cost.tokens_per_step = 1.0, m * n * float(np.mean(lengths))
    return cost
