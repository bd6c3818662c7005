"""Run label ``+token_budget``: the run allocates under the core's token budget, fed with the
response lengths of its rollouts."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.lab import runner
from coba_verl.lab.config import LabConfig, RunSpec, parse_run_label
from coba_verl.lab.runner import train_run
from tests.lab.test_lab_grpo import TINY, _constant_task_context


def test_token_budget_option_round_trips_and_sets_the_budget_unit() -> None:
    spec = parse_run_label("coba:proportional+prior+token_budget@0.5")
    assert spec == RunSpec("coba", 0.5, "proportional", True, "tokens")
    assert spec.label == "coba:proportional+prior+token_budget@0.5"
    cfg = LabConfig(**TINY, runs=["uniform", "coba+token_budget"])
    assert cfg.coba_config("coba", None, spec.budget_unit).budget_unit == "tokens"
    assert cfg.coba_config("coba").budget_unit == "rollouts"


def test_token_budget_on_a_strategy_without_one_is_refused() -> None:
    with pytest.raises(ValueError, match="budget_unit"):
        LabConfig(**TINY, runs=["knapsack+token_budget"])


def test_a_token_budget_run_allocates_by_tokens_from_the_lengths_it_generated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results = []
    real = runner.BudgetAllocator.allocate

    def spy(self, ids, total):
        res = real(self, ids, total)
        results.append((self.config.budget_unit, res))
        return res

    monkeypatch.setattr(runner.BudgetAllocator, "allocate", spy)
    cfg = LabConfig(
        **TINY, runs=["coba+token_budget"], n_train=10, n_eval=10, steps=6, prompts_per_step=5,
        rollouts_per_prompt=4, eval_every=6, eval_samples=1,
    )  # fmt: skip
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), parse_run_label("coba+token_budget"), rows.append)
    assert {unit for unit, _ in results} == {"tokens"}
    later = [res for _, res in results[2:]]  # epoch 2: every prompt has a measured length
    assert later and all("token_budget" in res.extra for res in later)
    assert all(not np.isnan(res.lengths).any() for res in later)
    for res in later:  # sum_i B_i L_i within what n rollouts each cost at these lengths
        assert float(np.sum(res.budgets * res.lengths)) <= 4 * float(res.lengths.sum()) + 1e-9
    assert [r["step_rollouts_trained"] for r in rows] == [int(res.budgets.sum()) for _, res in results]
    assert all(r["budget_unit"] == "tokens" for r in rows)
