"""BudgetAllocator and allocate(): strategies, cold start, resume, metrics, bad input."""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings

import numpy as np
import pytest

from coba_verl import BudgetAllocator, CapabilityTracker, CobaConfig, CobaValue, allocate
from coba_verl.core.allocator import prompt_mean_score, uniform_split
from coba_verl.core.config import STRATEGIES, auto_size_refills
from coba_verl.core.knapsack import allocate_knapsack
from coba_verl.core.release import allocate_release, band_share
from coba_verl.core.solvers import objective, solve_dp


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
        ({"min_rollouts": 0}, "coba.min_rollouts=0 is below 2"),
        ({"min_rollouts": 1}, "coba.min_rollouts=1 is below 2: under GRPO a group of one rollout"),
        ({"max_rollouts": 1}, "coba.max_rollouts=1 must be an integer >= coba.min_rollouts=2"),
        ({"kappa": 2.0}, "coba.kappa=2.0 must be > 2"),
        ({"window": 0}, "coba.window=0 must be an integer >= 1"),
        ({"tau": -1.0}, "coba.tau=-1.0 must be positive"),
        ({"solver": "magic"}, "coba.solver='magic' is unknown"),
        ({"p_clip_low": 0.5, "p_clip_high": 0.4}, "must satisfy 0 < low < high < 1"),
        ({"success_value": float("nan")}, "coba.success_value=nan must be finite: no score equals it"),
        ({"success_value": float("inf")}, "coba.success_value=inf must be finite: no score equals it"),
    ],
)
def test_config_raises_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CobaConfig(**kwargs)


def test_config_from_mapping_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"Unknown coba config keys \['kapa'\]"):
        CobaConfig.from_mapping({"kapa": 3})


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"kappa": "7"}, TypeError, "coba.kappa='7' (str) must be a number."),
        ({"min_rollouts": "2"}, TypeError, "coba.min_rollouts='2' (str) must be an integer."),
        ({"window": 1.5}, ValueError, "coba.window=1.5 (float) must be an integer."),
        ({"static_alpha": 0.5}, ValueError, "coba.static_alpha=0.5, coba.static_beta=9.0 must both be >= 1"),
        ({"size_refills": "yes"}, TypeError, "coba.size_refills='yes' (str) must be true or false."),
        ({"size_refills": 1}, TypeError, "coba.size_refills=1 (int) must be true or false."),
    ],
)
def test_config_errors_show_the_value_repr_and_type(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        CobaConfig(**kwargs)


P5 = np.array([0.0, 0.2, 0.5, 0.9, 1.0])


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (
            (P5, 40),
            {"min_rollouts": 1, "max_rollouts": 16},
            ValueError,
            "min_rollouts=1 is below 2: under GRPO a group of one rollout has no baseline, so its "
            "advantage would be its raw score. Set min_rollouts to 2 or more.",
        ),
        (
            (P5, 40),
            {"alpha": 3.0},
            ValueError,
            "alpha=3.0 was given without beta: pass both to fix the Beta shape, or neither to derive "
            "it from the pass rates.",
        ),
        ((P5, 40), {"beta": 3.0}, ValueError, "beta=3.0 was given without alpha"),
        (
            (P5, 40),
            {"alpha": -1, "beta": 3.0},
            ValueError,
            "alpha=-1, beta=3.0 must both be >= 1 (a Beta density bounded on (0, 1)).",
        ),
        (
            (P5, 40),
            {"alpha": 3.0, "beta": 0.5, "strategy": "static"},
            ValueError,
            "alpha=3.0, beta=0.5 must both be >= 1",
        ),
        ((P5, "40"), {}, TypeError, "total_budget='40' (str) must be an integer."),
        ((P5, 40.5), {}, ValueError, "total_budget=40.5 (float) must be an integer."),
        ((P5, 40), {"max_rollouts": "16"}, TypeError, "max_rollouts='16' (str) must be an integer."),
        ((P5, 40), {"max_rollouts": 1}, ValueError, "max_rollouts=1 must be an integer >= min_rollouts=2."),
        ((P5, 40), {"kappa": 2.0}, ValueError, "kappa=2.0 must be > 2"),
        ((P5, 40), {"tau": -1.0}, ValueError, "tau=-1.0 must be positive, or null/None for the adaptive"),
        ((P5, 40), {"strategy": "grpo"}, ValueError, "strategy='grpo' is unknown; choose one of"),
        ((P5, 40), {"solver": "greedy"}, ValueError, "solver='greedy' is unknown; choose one of"),
        ((np.array([0.5, 1.5]), 8), {}, ValueError, "pass rate 1.5 is outside [0, 1] (pass_rates[1])."),
        ((np.array([0.5, -np.inf]), 8), {}, ValueError, "pass rate -inf is outside [0, 1] (pass_rates[1])."),
        ((np.ones((2, 2)), 8), {}, ValueError, "pass_rates must be one-dimensional, got shape (2, 2)."),
        ((P5, 5), {}, ValueError, "total_budget=5 is infeasible for M=5 prompts with min_rollouts=2"),
        (
            (P5, 40),
            {"strategy": "knapsack", "lengths": [100.0] * 5},
            ValueError,
            "lengths (a token budget) needs a strategy whose value is maximised under a token budget, one "
            "of ('coba', 'static', 'reverse'); strategy='knapsack' allocates rollouts only. Pass "
            "lengths=None to count rollouts, or one of those strategies.",
        ),
    ],
)
def test_allocate_raise_error(args, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        allocate(*args, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"alpha": 3.0, "beta": 5.0, "strategy": "knapsack"},
            "alpha=3.0, beta=5.0 do not change the budgets of strategy='knapsack'; they are ignored.",
        ),
        ({"alpha": 3.0, "beta": 5.0, "strategy": "uniform"}, "do not change the budgets of strategy='unif"),
        ({"tau": 4.0, "strategy": "uniform"}, "tau=4.0 does not change the budgets of strategy='uniform'"),
        ({"kappa": 7.0, "strategy": "knapsack"}, "kappa=7.0 does not change the budgets of strategy='knap"),
        ({"kappa": 7.0, "strategy": "static"}, "kappa=7.0 does not change the budgets of strategy='static'"),
        (
            {"kappa": 7.0, "alpha": 3.0, "beta": 5.0},
            "kappa=7.0 does not change the budgets once alpha and beta are given; it is ignored.",
        ),
    ],
)
def test_allocate_warns_naming_an_argument_that_cannot_change_the_budgets(kwargs, message):
    with pytest.warns(UserWarning, match=re.escape(message)):
        allocate(P5, 40, max_rollouts=16, **kwargs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_defaults_and_used_knobs_raise_no_warning(strategy):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CobaConfig(strategy=strategy)
        allocate(P5, 40, max_rollouts=16, strategy=strategy)
        if strategy in ("coba", "coba_release", "static", "reverse"):
            allocate(P5, 40, max_rollouts=16, strategy=strategy, alpha=3.0, beta=5.0, tau=4.0)


def test_config_warns_when_a_knob_cannot_change_the_strategys_budgets():
    with pytest.warns(UserWarning, match=re.escape("coba.static_alpha=3.0 does not change the budgets of")):
        CobaConfig(strategy="coba", static_alpha=3.0)
    with pytest.warns(UserWarning, match=re.escape("coba.solver='heap' does not change the budgets of")):
        CobaConfig(strategy="uniform", solver="heap")


@pytest.mark.parametrize(
    ("strategy", "knob", "value"),
    [
        ("uniform", "window", 5),
        ("uniform", "success_value", 2.0),
        ("uniform", "prior_field", "extra_info.pass_rate"),
        ("uniform", "prior_file", "priors.jsonl"),
        ("uniform", "prior_weight", 4),
        ("knapsack", "window", 1),  # knapsack allocates from the last pass rate only
    ],
)
def test_config_warns_for_a_pass_rate_knob_the_strategy_does_not_read(strategy, knob, value):
    message = f"coba.{knob}={value!r} does not change the budgets of strategy={strategy!r}; it is ignored."
    with pytest.warns(UserWarning, match=re.escape(message)):
        CobaConfig(strategy=strategy, **{knob: value})
    readers = ["coba", "coba_release", "reverse", "static"] + ([] if knob == "window" else ["knapsack"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for reader in readers:
            CobaConfig(strategy=reader, **{knob: value})


def test_min_rollouts_below_two_is_refused_by_allocate_and_every_config():
    with pytest.raises(ValueError, match="min_rollouts=1 is below 2"):
        allocate(P5, 40, min_rollouts=1)
    for strategy in STRATEGIES:
        with pytest.raises(ValueError, match="coba.min_rollouts=1 is below 2"):
            CobaConfig(strategy=strategy, min_rollouts=1)


def test_uniform_gives_the_remainder_one_each_to_the_first_prompts():
    np.testing.assert_array_equal(allocate(P5, 41, strategy="uniform"), [9, 8, 8, 8, 8])
    np.testing.assert_array_equal(allocate(P5, 43, strategy="uniform"), [9, 9, 9, 8, 8])


def test_defaults_live_in_cobaconfig_only():
    defaults = {f.name: f.default for f in dataclasses.fields(CobaConfig)}
    params = inspect.signature(allocate).parameters
    for name in ("min_rollouts", "max_rollouts", "strategy", "kappa", "tau", "solver"):
        assert params[name].default == defaults[name], name
    tracker = inspect.signature(CapabilityTracker).parameters
    assert (tracker["window"].default, tracker["kappa"].default) == (defaults["window"], defaults["kappa"])
    value = CobaValue(3.0, 5.0)
    assert (value.p_low, value.p_high) == (defaults["p_clip_low"], defaults["p_clip_high"])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_size_refills_auto_is_c_size_for_coba_alone_and_under_dapo_only(strategy):
    """Only coba was measured with C-size on the DAPO bench: auto leaves every other strategy off."""
    expected = {"coba": True, "coba_release": False, "knapsack": False, "uniform": False, "static": False,
                "reverse": False}  # fmt: skip
    assert set(expected) == set(STRATEGIES)
    assert auto_size_refills(strategy, dapo=True) is expected[strategy]
    assert auto_size_refills(strategy, dapo=False) is False


@pytest.mark.parametrize("strategy", ["coba", "reverse", "coba_release"])
def test_allocate_derives_the_shape_a_tracker_would_after_one_step_at_these_rates(strategy):
    rates = np.array([0.0, 0.125, 0.5, 0.75, 1.0])
    alloc = BudgetAllocator(CobaConfig(strategy=strategy, max_rollouts=24), num_prompts=5)
    alloc.record(np.arange(5), (rates * 8).astype(int), np.full(5, 8))
    alloc.end_step()
    res = alloc.allocate(np.arange(5), 60)
    np.testing.assert_array_equal(res.budgets, allocate(rates, 60, max_rollouts=24, strategy=strategy))
    assert res.metrics["coba/alpha"] != alloc.tracker.kappa - 2  # a derived, not the initial, shape


def test_allocate_rejects_infeasible_budget_with_the_numbers():
    message = "total_budget=10 is infeasible for M=8 prompts with min_rollouts=2, max_rollouts=128"
    with pytest.raises(ValueError, match=message):
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


def test_prompt_mean_score_weighs_every_prompt_once_whatever_its_budget():
    """Prompt 0 got 6 rollouts (all pass), prompt 1 got 2 (all fail): per-prompt mean 0.5, while
    the mean over rollouts (veRL's critic/score/mean) is 0.75."""
    allocator = BudgetAllocator(CobaConfig(), 2)
    allocator.observe([0] * 6 + [1] * 2, [1.0] * 6 + [0.0] * 2)
    stats = allocator.end_step()
    assert stats["coba/prompt_mean_score"] == 0.5
    allocator.observe([1, 1], [1.0, 0.0])  # the next step starts from nothing
    assert allocator.end_step()["coba/prompt_mean_score"] == 0.5


def test_prompt_mean_score_groups_scattered_rollouts_by_prompt_and_refuses_a_nan_score():
    # prompt 8: [0, 1] -> 0.5; prompt 3: [1, 1, 1, 1] -> 1.0; rollout mean 5/6
    assert prompt_mean_score([3, 8, 3, 3, 8, 3], [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]) == 0.75
    assert np.isnan(prompt_mean_score([], []))
    with pytest.raises(ValueError, match=r"^score at position 1 is nan: rewards must be finite\.$"):
        prompt_mean_score([3, 8], [1.0, float("nan")])
    with pytest.raises(ValueError, match=r"ids \(2,\) and scores \(3,\) must have the same length"):
        prompt_mean_score([3, 8], [1.0, 0.0, 1.0])
