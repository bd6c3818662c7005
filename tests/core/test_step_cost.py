"""`coba_verl.core.step_cost`: the formulas, the DAPO model against closed forms, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.core.api import allocate
from coba_verl.core.capability import capability_shape
from coba_verl.core.metrics import histogram_edges
from coba_verl.core.step_cost import (
    Population,
    beta_binomial_fit,
    plan_step_cost,
)
from coba_verl.core.values import expected_no_spread, no_spread_probability
from coba_verl.refusal import CobaRefusal


def test_no_spread_probability_is_all_pass_plus_all_fail():
    p = np.array([0.0, 1.0, 0.5, 0.1, 0.1])
    b = np.array([4, 4, 2, 4, 16])
    assert no_spread_probability(p, b).tolist() == pytest.approx(
        [1.0, 1.0, 0.5, 0.1**4 + 0.9**4, 0.9**16 + 0.1**16]
    )


@pytest.mark.parametrize(
    ("a", "b", "budget"), [(1.0, 1.0, 2), (2.0, 3.0, 4), (1.72, 24.8, 16), (0.5, 0.5, 7)]
)
def test_expected_no_spread_is_the_beta_mean_of_q(a, b, budget):
    """E[p^B + (1 - p)^B] under Beta(a, b), against the integral on a fine grid (midpoint rule)."""
    grid = (np.arange(400_000) + 0.5) / 400_000
    log_pdf = (a - 1) * np.log(grid) + (b - 1) * np.log1p(-grid)
    pdf = np.exp(log_pdf - log_pdf.max())
    pdf /= pdf.sum()
    want = float(np.sum(pdf * no_spread_probability(grid, np.full(grid.size, budget))))
    assert float(expected_no_spread(np.array([a]), np.array([b]), budget)[0]) == pytest.approx(want, rel=2e-3)


def test_beta_binomial_fit_recovers_the_population_beta():
    rng = np.random.default_rng(0)
    p = rng.beta(2.0, 8.0, 4000)
    attempts = np.full(p.size, 20)
    a, b = beta_binomial_fit(rng.binomial(attempts, p), attempts)
    assert a == pytest.approx(2.0, rel=0.15) and b == pytest.approx(8.0, rel=0.15)


@pytest.mark.parametrize("strategy", ["uniform", "coba", "knapsack"])
def test_pass_rates_of_0_and_1_leave_every_group_without_spread(strategy):
    pop = Population.from_rates([0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    cost = plan_step_cost(pop, prompts=4, n=4, max_rollouts=16, strategy=strategy, draws=5)
    assert cost.no_spread_share == 1.0
    assert cost.generated_per_trained == 1.0


def test_dapo_with_pass_rates_of_0_and_1_is_refused_as_never_filling():
    pop = Population.from_rates([0.0, 1.0, 0.0, 1.0])
    with pytest.raises(CobaRefusal, match="every pass rate is 0 or 1"):
        plan_step_cost(pop, prompts=4, n=4, strategy="uniform", dapo=True)


@pytest.mark.parametrize("strategy", ["uniform", "coba", "coba_release", "knapsack"])
def test_without_dapo_every_rollout_generated_is_trained(strategy):
    pop = Population.from_rates(np.linspace(0.0, 1.0, 40), lengths=np.linspace(5.0, 50.0, 40))
    cost = plan_step_cost(pop, prompts=8, n=8, max_rollouts=32, strategy=strategy, steps=3, draws=7)
    assert cost.generated_per_trained == 1.0 and cost.tokens_per_trained_token == 1.0
    assert cost.generated_per_step == 64 and cost.prompts_per_step == 8


def test_one_batch_gets_the_budgets_of_the_core_allocate_and_their_expected_share():
    """K = M: every round is the same prompts, so the plan's budgets are `allocate`'s, with alpha, beta
    from F_bar = 1 - mean p (the tracker seeded with them), and the share is mean_i q(p_i, B_i)."""
    p = np.array([0.0, 0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95])
    alpha, beta = capability_shape(1.0 - p.mean(), 11.0)
    budgets = allocate(p, 8 * 6, 2, 24, alpha=alpha, beta=beta)
    cost = plan_step_cost(Population.from_rates(p), prompts=8, n=6, max_rollouts=24, draws=3)
    assert (cost.alpha, cost.beta) == pytest.approx((alpha, beta), abs=1e-6)
    want, _ = np.histogram(budgets, bins=histogram_edges(2, 24))
    assert list(cost.histogram.values()) == pytest.approx(want.tolist())
    assert cost.no_spread_share == pytest.approx(float(np.mean(no_spread_probability(p, budgets))), abs=1e-6)


def test_a_dapo_step_of_one_prompt_generates_a_geometric_number_of_groups():
    """M = 1: one prompt a wave until one group has a spread, so E[generated / trained] = 1 / (1 - q)."""
    q = 0.3**4 + 0.7**4
    cost = plan_step_cost(
        Population.from_rates([0.3]), prompts=1, n=4, strategy="uniform", dapo=True, draws=4000
    )
    assert cost.generated_per_trained == pytest.approx(1 / (1 - q), abs=0.03)
    assert cost.no_spread_share == pytest.approx(q)


def test_dapo_trains_m_times_n_and_coba_wastes_less_on_all_fail_prompts():
    """Half the prompts never pass: uniform evicts n rollouts for each, coba mostly B_low = 2."""
    p = np.r_[np.zeros(32), np.full(32, 0.5)]
    pop = Population.from_rates(p)
    kw = dict(prompts=16, n=8, max_rollouts=32, dapo=True, draws=40)
    uniform, coba = plan_step_cost(pop, strategy="uniform", **kw), plan_step_cost(pop, strategy="coba", **kw)
    assert uniform.short_steps == coba.short_steps == 0
    assert uniform.generated_per_trained > 1.9 and coba.generated_per_trained < uniform.generated_per_trained


def test_the_skip_leaves_never_passing_prompts_ungenerated_and_cuts_the_waste():
    """Half the prompts never pass (0 of 10^6 attempts): each is skipped unless its exploration draw
    (chance 0.1, the default) lets it through, and a step fills M n from the others with less
    generation."""
    p = np.r_[np.zeros(32), np.full(32, 0.5)]
    pop = Population.from_rates(p)
    kw = dict(prompts=16, n=8, max_rollouts=32, dapo=True, draws=40, strategy="coba")
    plain, skip = plan_step_cost(pop, **kw), plan_step_cost(pop, skip_spread_below=0.1, **kw)
    assert skip.short_steps == 0
    assert skip.histogram["0 (skipped)"] == pytest.approx(8 * 0.9, abs=0.6)  # half a round, less explored
    assert skip.no_spread_share < 0.5 * plain.no_spread_share  # mostly p = 0.5 groups generated
    assert skip.generated_per_trained < 0.8 * plain.generated_per_trained
    with pytest.raises(CobaRefusal, match="skip_spread_below=0.1 needs dapo"):
        plan_step_cost(pop, **{**kw, "dapo": False}, skip_spread_below=0.1)


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    pop = Population.from_rates(np.linspace(0.05, 0.6, 64))
    kw = dict(prompts=16, n=4, max_rollouts=16, dapo=True, draws=20, steps=2)
    first, again, other = (plan_step_cost(pop, seed=s, **kw) for s in (3, 3, 4))
    assert repr(first) == repr(again)  # NaN fields (no lengths) compare unequal
    assert first.generated_per_trained != other.generated_per_trained


def test_a_failure_rate_fixes_the_beta():
    pop = Population.from_rates(np.linspace(0.0, 1.0, 32))
    cost = plan_step_cost(pop, prompts=16, n=4, max_rollouts=16, failure_rate=0.3, draws=2, steps=2)
    assert (cost.alpha, cost.beta) == pytest.approx(capability_shape(0.3, 11.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompts": 0}, "prompts=0 must be >= 1"),
        ({"n": 1}, "min_rollouts=1 is below 2|n=1 lies outside"),
        ({"n": 200}, r"n=200 lies outside \[min_rollouts=2, max_rollouts=128\]"),
        ({"n": 3, "min_rollouts": 4}, r"n=3 lies outside \[min_rollouts=4"),
        ({"prompts": 40}, "32 prompts given for prompts=40"),
        ({"truth": "posterior"}, "needs counts"),
        ({"truth": "oracle"}, "truth='oracle' is unknown"),
        ({"strategy": "uniform", "failure_rate": 0.5}, "strategy='uniform' has none"),
        ({"failure_rate": 1.5}, "failure_rate=1.5 is not a failure rate"),
        ({"strategy": "greedy"}, "strategy='greedy' is unknown"),
        ({"draws": 0}, "steps x draws = 0"),
    ],
)
def test_bad_inputs_are_refused_naming_the_value(kwargs, message):
    pop = Population.from_rates(np.linspace(0.0, 1.0, 32))
    with pytest.raises(CobaRefusal, match=message):
        plan_step_cost(pop, **{"prompts": 16, "n": 4, **kwargs})


@pytest.mark.parametrize(
    ("rates", "message"), [([0.2, 1.5], r"1\.5 \(position 1\) lies outside"), ([], "none")]
)
def test_pass_rates_outside_0_1_are_refused(rates, message):
    with pytest.raises(CobaRefusal, match=message):
        Population.from_rates(rates)


@pytest.mark.parametrize(
    ("lengths", "message"),
    [([1.0, 2.0], r"2 answer lengths \(min 1.0\) for 3"), ([1.0, 0.0, 2.0], r"\(min 0.0\)")],
)
def test_bad_answer_lengths_are_refused(lengths, message):
    with pytest.raises(CobaRefusal, match=message):
        Population.from_rates([0.1, 0.2, 0.3], lengths=lengths)


def test_sized_waves_generate_only_what_the_filter_evicts_beyond_the_trained_batch():
    """Uniform n = 4 at p = 0.15: a group has no spread with q = 0.15^4 + 0.85^4. With waves sized to
    the rollouts missing (C-size) nothing beyond M n survives the filter, so generated per trained is
    1 / (1 - q); veRL's refill of 2k prompts for k evicted generates surplus groups on top."""
    pop = Population.from_rates(np.full(64, 0.15))
    kw = dict(prompts=16, n=4, max_rollouts=16, dapo=True, draws=60, strategy="uniform")
    plain, sized = plan_step_cost(pop, **kw), plan_step_cost(pop, size_refills=True, **kw)
    q = 0.15**4 + 0.85**4
    assert sized.short_steps == plain.short_steps == 0
    assert sized.generated_per_trained == pytest.approx(1 / (1 - q), rel=0.05)
    assert plain.generated_per_trained > 1.1 * sized.generated_per_trained
    with pytest.raises(CobaRefusal, match="size_refills needs dapo"):
        plan_step_cost(pop, **{**kw, "dapo": False}, size_refills=True)
