"""`coba_verl.trl.groups`: collapsing TRL's repeated rows, expanding by budget, variable-group advantages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coba_verl.trl.groups import (
    collapse_runs,
    expand_rows,
    group_advantages,
    group_index,
    padded_groups,
    prompt_mean_score,
    row_scores,
)


def test_collapse_runs_returns_first_row_of_each_run():
    assert collapse_runs([7, 7, 7, 2, 2, 2, 5, 5, 5], 3).tolist() == [0, 3, 6]
    assert collapse_runs(["a", "a", "b", "b"], 2).tolist() == [0, 2]


@pytest.mark.parametrize(
    ("ids", "g", "message"),
    [
        ([7, 7, 2, 2, 2, 2], 3, r"rows 0\.\.2 of the generation round hold prompt ids \[7, 7, 2\]"),
        ([7, 7, 7, 7, 2], 2, r"a generation round of 5 rows cannot be M runs of num_generations=2"),
        ([], 2, r"a generation round of 0 rows"),
    ],
)
def test_collapse_runs_raises_on_rows_not_from_repeat_sampler(ids, g, message):
    with pytest.raises(RuntimeError, match=message):
        collapse_runs(ids, g)


def test_expand_rows_repeats_each_prompt_by_its_budget_as_copies():
    rows = [{"p": "a"}, {"p": "b"}, {"p": "c"}]
    out = expand_rows(rows, np.array([2, 3, 1]))
    assert [r["p"] for r in out] == ["a", "a", "b", "b", "b", "c"]
    out[0]["extra"] = 1  # TRL writes into its input rows: copies keep the prompts independent
    assert "extra" not in out[1] and "extra" not in rows[0]
    assert group_index(np.array([2, 3, 1])).tolist() == [0, 0, 1, 1, 1, 2]


def test_padded_groups_equals_view_for_equal_groups_and_pads_with_nan():
    values = torch.arange(12, dtype=torch.float32)
    assert torch.equal(padded_groups(values, np.full(3, 4)), values.view(3, 4))
    padded = padded_groups(torch.arange(5.0), np.array([2, 3]))
    assert torch.equal(padded[1], torch.tensor([2.0, 3.0, 4.0]))
    assert padded[0, :2].tolist() == [0.0, 1.0] and torch.isnan(padded[0, 2])


def _reference(rewards: np.ndarray, budgets: np.ndarray, scale: str) -> np.ndarray:
    """Plain per-group loop: (r - mean_g) / (s + 1e-4), s = sample std of the group / batch / none."""
    out = np.empty_like(rewards)
    start = 0
    for b in budgets:
        g = rewards[start : start + b]
        s = {"group": np.std(g, ddof=1), "batch": np.std(rewards, ddof=1), "none": None}[scale]
        out[start : start + b] = (g - g.mean()) if s is None else (g - g.mean()) / (s + 1e-4)
        start += b
    return out


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sum_then_normalize_matches_a_per_group_loop(scale, seed):
    rng = np.random.default_rng(seed)
    budgets = rng.integers(2, 9, size=6)
    rewards = rng.integers(0, 3, size=(int(budgets.sum()), 2)).astype(np.float32)
    weights = torch.tensor([1.0, 0.5])
    adv, is_zero = group_advantages(
        torch.from_numpy(rewards),
        weights,
        budgets,
        scale_rewards=scale,
        multi_objective_aggregation="sum_then_normalize",
    )
    expected = _reference(rewards @ np.array([1.0, 0.5], dtype=np.float32), budgets, scale)
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert adv.shape == is_zero.shape == (int(budgets.sum()),)


def test_advantages_are_centred_within_each_variable_group():
    budgets = np.array([2, 7, 3])
    rewards = torch.tensor([1, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1], dtype=torch.float32)[:, None]
    adv, is_zero = group_advantages(
        rewards,
        torch.ones(1),
        budgets,
        scale_rewards="group",
        multi_objective_aggregation="sum_then_normalize",
    )
    sums = [float(adv[s : s + b].sum()) for s, b in zip(np.cumsum(budgets) - budgets, budgets, strict=True)]
    np.testing.assert_allclose(sums, 0.0, atol=1e-5)
    assert is_zero.tolist() == [False] * 9 + [True] * 3  # only the last group is all-equal


def test_normalize_then_sum_matches_per_function_group_z_scores():
    rng = np.random.default_rng(3)
    budgets = np.array([3, 5, 2])
    rewards = rng.normal(size=(10, 2)).astype(np.float32)
    adv, _ = group_advantages(
        torch.from_numpy(rewards),
        torch.tensor([1.0, 2.0]),
        budgets,
        scale_rewards="group",
        multi_objective_aggregation="normalize_then_sum",
    )
    z = np.concatenate([_reference(rewards[:, k], budgets, "group")[:, None] for k in range(2)], axis=1)
    summed = z @ np.array([1.0, 2.0])
    expected = (summed - summed.mean()) / (np.std(summed, ddof=1) + 1e-4)
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_unscorable_rows_get_zero_advantage_and_leave_the_baseline():
    nan = float("nan")
    rewards = torch.tensor([[1.0], [nan], [0.0], [0.0], [1.0]])
    adv, _ = group_advantages(
        rewards,
        torch.ones(1),
        np.array([3, 2]),
        scale_rewards="none",
        multi_objective_aggregation="sum_then_normalize",
    )
    assert adv.tolist() == [0.5, 0.0, -0.5, -0.5, 0.5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(scale_rewards="median", multi_objective_aggregation="sum_then_normalize"),
            "scale_rewards='median'",
        ),
        (dict(scale_rewards="group", multi_objective_aggregation="max"), "multi_objective_aggregation='max'"),
    ],
)
def test_group_advantages_raises_on_unknown_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(torch.zeros(4, 1), torch.ones(1), np.array([2, 2]), **kwargs)


def test_group_advantages_raises_when_budgets_do_not_cover_the_rows():
    with pytest.raises(ValueError, match="budgets sum to 5 but there are 4 reward rows"):
        group_advantages(
            torch.zeros(4, 1),
            torch.ones(1),
            np.array([2, 3]),
            scale_rewards="group",
            multi_objective_aggregation="sum_then_normalize",
        )


def test_prompt_mean_score_counts_each_prompt_once_where_the_row_mean_weighs_by_budget():
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    assert prompt_mean_score(scores, np.array([6, 2])) == 0.5
    assert float(scores.mean()) == 0.75  # TRL's reward: the easy prompt's six rollouts dominate


def test_prompt_mean_score_equals_the_row_mean_for_equal_groups_and_skips_unscored_rows():
    scores = torch.from_numpy(np.random.default_rng(0).random(12))
    assert prompt_mean_score(scores, np.full(3, 4)) == pytest.approx(float(scores.mean()))
    nan = float("nan")
    # prompt 0: mean of 1 and 0; prompt 1: nothing scored, left out
    assert prompt_mean_score(torch.tensor([1.0, nan, 0.0, nan, nan]), np.array([3, 2])) == 0.5


def test_row_scores_are_the_weighted_sum_and_nan_where_no_function_scored():
    nan = float("nan")
    rewards = torch.tensor([[1.0, 2.0], [nan, 2.0], [nan, nan]])
    scores = row_scores(rewards, torch.tensor([1.0, 0.5]))
    assert scores[:2].tolist() == [2.0, 1.0] and torch.isnan(scores[2])
