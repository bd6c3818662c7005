"""BudgetAllocator and allocate(): strategies, cold start, resume, metrics, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl import BudgetAllocator, CobaConfig, allocate
from coba_verl.core.allocator import uniform_split
from coba_verl.core.config import STRATEGIES
from coba_verl.core.knapsack import allocate_knapsack
from coba_verl.core.release import allocate_release, band_share
from coba_verl.core.solvers import objective, solve_dp
from coba_verl.core.values import CobaValue


def _run_steps(
    alloc: BudgetAllocator, rng: np.random.Generator, steps: int, m: int, n: int
) -> list[np.ndarray]:
    out = []
    true_p = np.linspace(0.0, 1.0, alloc.tracker.num_prompts)
    for _ in range(steps):
        ids = rng.choice(alloc.tracker.num_prompts, size=m, replace=False)
        res = alloc.allocate(ids, m * n)
        out.append(res.budgets)
        rollout_ids = np.repeat(ids, res.budgets)  # [4, 9] with budgets [2, 3] -> [4, 4, 9, 9, 9]
        alloc.observe(rollout_ids, (rng.random(rollout_ids.size) < true_p[rollout_ids]).astype(float))
        alloc.end_step()
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_spends_exactly_the_budget_within_bounds(strategy):
    alloc = BudgetAllocator(CobaConfig(strategy=strategy, max_rollouts=40), num_prompts=64)
    for budgets in _run_steps(alloc, np.random.default_rng(1), steps=6, m=16, n=8):
        assert budgets.sum() == 16 * 8
        assert budgets.min() >= 2 and budgets.max() <= 40


def test_uniform_strategy_reproduces_stock_grpo():
    alloc = BudgetAllocator(CobaConfig(strategy="uniform"), num_prompts=64)
    for budgets in _run_steps(alloc, np.random.default_rng(2), steps=4, m=16, n=8):
        np.testing.assert_array_equal(budgets, np.full(16, 8))


def test_batch_without_history_is_split_uniformly():
    alloc = BudgetAllocator(CobaConfig(), num_prompts=10)
    res = alloc.allocate([1, 2, 3], 48)
    np.testing.assert_array_equal(res.budgets, [16, 16, 16])
    assert res.metrics["coba/cold_start"] == 1.0


def test_unseen_prompt_uses_half_pass_rate_when_others_have_history():
    cfg = CobaConfig(tau=5.0)
    alloc = BudgetAllocator(cfg, num_prompts=10)
    alloc.record([1, 2], [1, 7], [8, 8])
    alloc.end_step()
    res = alloc.allocate([1, 2, 3], 48)
    assert np.isnan(res.pass_rates[2])
    alpha, beta = alloc.tracker.shape()
    expected = allocate(np.array([1 / 8, 7 / 8, 0.5]), 48, alpha=alpha, beta=beta, tau=5.0, strategy="static")
    np.testing.assert_array_equal(res.budgets, expected)


def test_resume_reproduces_the_uninterrupted_allocations():
    cfg = CobaConfig(window=2)
    full = BudgetAllocator(cfg, num_prompts=100)
    uninterrupted = _run_steps(full, np.random.default_rng(3), steps=8, m=20, n=16)

    first = BudgetAllocator(cfg, num_prompts=100)
    rng = np.random.default_rng(3)
    head = _run_steps(first, rng, steps=5, m=20, n=16)
    state = first.state_dict()
    resumed = BudgetAllocator(cfg, num_prompts=100)
    resumed.load_state_dict(state)
    tail = _run_steps(resumed, rng, steps=3, m=20, n=16)
    for a, b in zip(uninterrupted, head + tail, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.all(b == 16) for b in uninterrupted[1:])  # the allocation really varied


def test_metrics_report_budget_statistics_and_shape():
    alloc = BudgetAllocator(CobaConfig(max_rollouts=32), num_prompts=10)
    alloc.record([0, 1, 2, 3], [0, 2, 8, 4], [8, 8, 8, 8])
    step = alloc.end_step()
    assert step["coba/F_t"] == pytest.approx(1 - np.mean([0, 0.25, 1, 0.5]))
    assert step["coba/all_pass_share"] == 0.25 and step["coba/all_fail_share"] == 0.25
    res = alloc.allocate([0, 1, 2, 3], 32)
    m = res.metrics
    assert m["coba/budget_mean"] == 8.0
    assert m["coba/budget_min"] >= 2 and m["coba/budget_max"] <= 32
    assert m["coba/alpha"] == step["coba/alpha_next"]
    assert 3.0 <= m["coba/tau"] <= 12.0
    p, b = np.array([0, 0.25, 1, 0.5]), res.budgets
    assert m["coba/expected_zero_var_share"] == pytest.approx(np.mean(p**b + (1 - p) ** b))
    assert m["coba/expected_zero_var_share_uniform"] == pytest.approx(np.mean(p**8 + (1 - p) ** 8))
    assert m["coba/at_min_rollouts"] == np.sum(b == 2)


def test_uniform_split_gives_the_remainder_to_the_first_prompts():
    np.testing.assert_array_equal(uniform_split(4, 10), [3, 3, 2, 2])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "grpo"}, "coba.strategy='grpo' is unknown"),
        ({"min_rollouts": 0}, "coba.min_rollouts=0 must be an integer >= 1"),
        ({"max_rollouts": 1}, "coba.max_rollouts=1 must be an integer >= coba.min_rollouts=2"),
        ({"kappa": 2.0}, "coba.kappa=2.0 must be > 2"),
        ({"window": 0}, "coba.window=0 must be an integer >= 1"),
        ({"tau": -1.0}, "coba.tau=-1.0 must be positive"),
        ({"solver": "magic"}, "coba.solver='magic' is unknown"),
        ({"p_clip_low": 0.5, "p_clip_high": 0.4}, "must satisfy 0 < low < high < 1"),
    ],
)
def test_config_raises_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CobaConfig(**kwargs)


def test_config_from_mapping_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"Unknown coba config keys \['kapa'\]"):
        CobaConfig.from_mapping({"kapa": 3})


def test_allocate_rejects_infeasible_budget_with_the_numbers():
    with pytest.raises(ValueError, match="total=10 is infeasible for M=8 prompts with low=2, up=128"):
        allocate(np.full(8, 0.5), 10)


def test_allocate_rejects_pass_rates_outside_unit_interval():
    with pytest.raises(ValueError, match="pass rate 1.5 is outside"):
        allocate(np.array([0.5, 1.5]), 8)


def test_coba_explores_hard_prompts_once_the_model_is_capable():
    p = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    early = allocate(p, 80, alpha=9.0, beta=2.0, max_rollouts=40, tau=6.0)  # failing a lot: exploit
    late = allocate(p, 80, alpha=2.0, beta=9.0, max_rollouts=40, tau=6.0)  # capable: explore
    assert early[3] > early[1] and late[1] > late[3]


def test_release_band_share_and_fallback_order():
    assert band_share(0.6) == 0.8
    assert band_share(0.25) == pytest.approx(0.7)
    p = np.array([0.0, 0.02, 0.5, 0.6, 1.0])  # hard, hard, band, band, easy
    b, info = allocate_release(p, 40, 2, 30, CobaValue(5.0, 6.0, tau=5.0))
    assert b.sum() == 40 and info["release/band"] == 2
    # band share r = 0.6 + 0.2 * 2 * 0.4 = 0.76 of the surplus 30 -> 22 to the band, 8 to hard.
    assert b[2] + b[3] == 4 + 22
    assert b[0] + b[1] == 4 + 8 and b[0] >= b[1]  # weights 1 - p favour the harder one
    assert b[4] == 2


def test_release_band_optimum_matches_dp():
    rng = np.random.default_rng(5)
    p = rng.random(12) * 0.9 + 0.05
    value = CobaValue(4.0, 7.0)
    b, _ = allocate_release(p, 12 * 6, 2, 20, value, solver="fast")
    ref, _ = allocate_release(p, 12 * 6, 2, 20, value, solver="dp")
    g = value.gains(p)
    assert objective(g, b) == pytest.approx(objective(g, ref), rel=1e-12)


def test_knapsack_rules_for_certain_outcomes_and_unseen_prompts():
    p = np.array([0.0, 1.0, np.nan, 0.5, 0.25])
    b = allocate_knapsack(p, 5 * 8, 2, 128)
    assert b.sum() == 40
    assert b[1] == 2  # always solved
    assert b[2] == 8  # no history: the uniform share
    assert b[0] >= 2 and b[3] > 2 and b[4] > 2


def test_knapsack_effective_prompts_get_the_knapsack_optimum():
    p = np.array([0.2, 0.5, 0.8, 0.4])
    b = allocate_knapsack(p, 4 * 30, 2, 128)  # est < R never triggers: no p = 0 prompts to take it
    from coba_verl.core.values import KnapsackValue

    g = KnapsackValue().gains(p)
    assert objective(g, b) == pytest.approx(objective(g, solve_dp(g, 120, 2, 128)), rel=1e-12)
