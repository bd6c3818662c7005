"""The token budget (`coba_verl.core.token_budget`): feasibility, the stated bound against
exhaustive search, and agreement with the rollout solver when every prompt costs the same."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coba_verl import allocate
from coba_verl.core.gains import GeometricGains, KnapsackGains
from coba_verl.core.solvers import objective, solve_heap
from coba_verl.core.token_budget import fill_lengths, solve_tokens
from coba_verl.core.values import CobaValue


def brute_force(gains, lengths, capacity, low, up) -> float:
    """max sum_i V_i(B_i) over every integer vector in [low, up]^M with sum_i B_i L_i <= capacity."""
    best = -np.inf
    for budgets in itertools.product(range(low, up + 1), repeat=gains.size):
        b = np.asarray(budgets)
        if float(b @ lengths) <= capacity + 1e-9:
            best = max(best, objective(gains, b))
    return best


@settings(max_examples=60, deadline=None)
@given(
    p=st.lists(st.floats(0.02, 0.98), min_size=2, max_size=4),
    lengths=st.lists(st.integers(5, 60), min_size=4, max_size=4),
    n=st.integers(2, 5),
    up=st.integers(4, 7),
    alpha=st.floats(1.0, 9.0),
)
def test_greedy_is_feasible_and_within_the_largest_gain_of_the_exhaustive_optimum(p, lengths, n, up, alpha):
    p = np.asarray(p)
    length = np.asarray(lengths[: p.size], dtype=np.float64)
    gains = CobaValue(alpha, 11.0 - alpha, tau=None).gains(p)
    low = 2
    capacity = n * float(length.sum())
    budgets = solve_tokens(gains, length, capacity, low, up)
    assert np.all((low <= budgets) & (budgets <= up))
    assert float(budgets @ length) <= capacity + 1e-9
    opt = brute_force(gains, length, capacity, low, up)
    got = objective(gains, budgets)
    assert got <= opt + 1e-12
    assert opt - got <= float(gains.gain(np.full(p.size, low)).max()) + 1e-12


@settings(max_examples=40, deadline=None)
@given(p=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=6), n=st.integers(2, 6))
def test_equal_lengths_reach_the_rollout_solvers_optimum(p, n):
    p = np.asarray(p)
    gains = KnapsackGains(p)
    length = np.full(p.size, 37.0)
    budgets = solve_tokens(gains, length, n * float(length.sum()), 2, 12)
    assert int(budgets.sum()) == n * p.size
    assert objective(gains, budgets) == pytest.approx(objective(gains, solve_heap(gains, n * p.size, 2, 12)))


def test_long_answers_get_fewer_rollouts_than_under_the_rollout_budget():
    p = np.array([0.3, 0.3, 0.5, 0.5])
    lengths = np.array([900.0, 100.0, 900.0, 100.0])
    by_rollouts = allocate(p, 32, max_rollouts=16)
    by_tokens = allocate(p, 32, max_rollouts=16, lengths=lengths)
    assert by_rollouts[0] == by_rollouts[1] and by_tokens[0] < by_tokens[1]
    assert float(by_tokens @ lengths) <= 8 * lengths.sum()
    assert float(by_rollouts @ lengths) > 0  # the rollout budget ignores the lengths


def test_unknown_lengths_take_the_mean_of_the_known_and_none_known_means_rollouts():
    np.testing.assert_array_equal(fill_lengths(np.array([10.0, np.nan, 30.0])), [10.0, 20.0, 30.0])
    assert fill_lengths(np.array([np.nan, np.nan])) is None
    p = np.array([0.2, 0.5, 0.9])
    np.testing.assert_array_equal(
        allocate(p, 24, max_rollouts=16, lengths=[np.nan] * 3), allocate(p, 24, max_rollouts=16)
    )


@pytest.mark.parametrize("bad", [0.0, -4.0, np.inf, -np.inf])
def test_a_bad_length_is_refused_by_value_while_nan_stays_unknown(bad):
    """NaN marks a length never recorded (filled with the mean of the known); any other value is a
    measurement, and one that is not a positive finite token count is an error naming it."""
    with pytest.raises(ValueError, match=rf"length of prompt 1 is {bad}"):
        fill_lengths(np.array([10.0, bad, np.nan, 30.0]))
    with pytest.raises(ValueError, match=rf"length of prompt 1 is {bad}"):
        allocate(np.array([0.2, 0.5, 0.9]), 24, max_rollouts=16, lengths=[100.0, bad, 50.0])


def test_bad_lengths_and_a_capacity_below_b_low_are_refused_by_name():
    gains = GeometricGains(np.ones(2), np.full(2, 0.1))
    with pytest.raises(ValueError, match="length of prompt 1 is -4.0"):
        solve_tokens(gains, np.array([3.0, -4.0]), 100.0, 2, 8)
    with pytest.raises(ValueError, match="below B_low"):
        solve_tokens(gains, np.array([30.0, 40.0]), 100.0, 2, 8)


def test_token_budget_is_refused_for_strategies_that_allocate_rollouts_only():
    from coba_verl.core.config import CobaConfig

    with pytest.raises(ValueError, match="strategy='knapsack' allocates rollouts only"):
        CobaConfig(strategy="knapsack", budget_unit="tokens")
    with pytest.raises(ValueError, match="budget_unit='bytes' is unknown"):
        CobaConfig(budget_unit="bytes")


def test_uniform_zero_variance_share_under_a_token_budget_counts_n_rollouts_each():
    """The uniform baseline of ``expected_zero_var_share_uniform`` is n = total / M rollouts per prompt,
    not the token budget's varying sum_i B_i split evenly."""
    from coba_verl.core.allocator import BudgetAllocator
    from coba_verl.core.config import CobaConfig

    allocator = BudgetAllocator(CobaConfig(budget_unit="tokens", max_rollouts=16), num_prompts=4)
    successes = [3, 3, 5, 5]  # of 10 rollouts each: p = [0.3, 0.3, 0.5, 0.5]
    ids = np.repeat(np.arange(4), 10)
    scores = np.concatenate([[1.0] * s + [0.0] * (10 - s) for s in successes])
    allocator.observe(ids, scores, np.repeat([900, 900, 900, 100], 10))
    allocator.end_step()
    result = allocator.allocate(np.arange(4), 16)  # n = 4
    assert int(result.budgets.sum()) != 16  # the token budget moved the rollout total
    p = np.array([0.3, 0.3, 0.5, 0.5])
    metrics = result.metrics
    assert metrics["coba/expected_zero_var_share_uniform"] == pytest.approx(np.mean(p**4 + (1 - p) ** 4))
    b = result.budgets
    assert metrics["coba/expected_zero_var_share"] == pytest.approx(np.mean(p**b + (1 - p) ** b))
