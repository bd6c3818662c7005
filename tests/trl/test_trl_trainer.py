"""`CobaGRPOTrainer` taking real TRL optimiser steps on CPU, against stock `GRPOTrainer`."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from trl import GRPOTrainer

from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer


class Recording:
    """Keeps, per training round, the prompts sent to generation, the completions, the gathered
    rewards (T, F) and the advantages handed to the loss (before TRL's shuffle)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rec = SimpleNamespace(prompts=[], completions=[], rewards=[], advantages=[])

    def _generate(self, prompts):
        out = super()._generate(prompts)
        if self.model.training:
            self.rec.prompts.append(list(prompts))
            self.rec.completions.append(list(out[3]))
        return out

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.model.training:
            self.rec.rewards.append(rewards.clone())
        return rewards

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.rec.advantages.append(out["advantages"].clone())
        return out


class RecordingGRPO(Recording, GRPOTrainer):
    pass


class RecordingCoba(Recording, CobaGRPOTrainer):
    pass


def spy_allocator(trainer: CobaGRPOTrainer) -> SimpleNamespace:
    """Record every allocation (ids, result) and every observe call (ids, scores) of the trainer."""
    seen = SimpleNamespace(allocations=[], observed=[])
    allocate, observe = trainer.allocator.allocate, trainer.allocator.observe

    def allocate_spy(ids, total):
        result = allocate(ids, total)
        seen.allocations.append((np.asarray(ids).copy(), result))
        return result

    def observe_spy(ids, scores):
        seen.observed.append((np.asarray(ids).copy(), np.asarray(scores).copy()))
        return observe(ids, scores)

    trainer.allocator.allocate, trainer.allocator.observe = allocate_spy, observe_spy
    return seen


def losses(trainer: GRPOTrainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


@pytest.mark.parametrize(
    ("scale_rewards", "aggregation", "two_rewards"),
    [
        ("group", "sum_then_normalize", False),
        ("batch", "sum_then_normalize", False),
        ("none", "sum_then_normalize", True),
        ("group", "normalize_then_sum", True),
    ],
)
def test_uniform_strategy_takes_the_same_steps_as_stock_grpo(
    make_trainer, grpo_config, toy, scale_rewards, aggregation, two_rewards
):
    funcs = [toy.mixed_reward, toy.length_reward] if two_rewards else toy.mixed_reward
    runs = {}
    for name, cls, extra in [
        ("stock", RecordingGRPO, {}),
        ("coba", RecordingCoba, {"coba_config": CobaConfig(strategy="uniform")}),
    ]:
        config = grpo_config(scale_rewards=scale_rewards, multi_objective_aggregation=aggregation)
        trainer = make_trainer(cls, config, reward_funcs=funcs, **extra)
        start = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.train()
        runs[name] = trainer
    stock, coba = runs["stock"], runs["coba"]

    assert coba.rec.completions == stock.rec.completions
    for mine, theirs in zip(coba.rec.advantages, stock.rec.advantages, strict=True):
        assert torch.equal(mine, theirs)
    assert any(bool(a.abs().sum() > 0) for a in stock.rec.advantages), "the test needs a learning signal"
    assert losses(coba) == losses(stock) and len(losses(coba)) == 3
    for mine, theirs in zip(coba.model.parameters(), stock.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    assert any(not torch.equal(p, s) for p, s in zip(coba.model.parameters(), start, strict=True))
    logged = [h for h in coba.state.log_history if "loss" in h]  # equal groups: the two means agree
    assert all(h["coba/prompt_mean_score"] == pytest.approx(h["reward"]) for h in logged)


def test_coba_generates_each_prompt_its_budget_and_centres_advantages_per_group(
    make_trainer, grpo_config, toy
):
    coba = CobaConfig(max_rollouts=10, group_weight="proportional")  # the advantages before the group weight
    trainer = make_trainer(RecordingCoba, grpo_config(max_steps=4), coba_config=coba)
    seen = spy_allocator(trainer)
    trainer.train()

    total = len(toy.prompts) * toy.G
    assert len(seen.allocations) == len(seen.observed) == 4
    for step, (ids, allocation) in enumerate(seen.allocations):
        budgets = allocation.budgets
        assert budgets.sum() == total and budgets.min() >= 2 and budgets.max() <= 10
        # exactly B_i completions of prompt i reached generation (ids are dataset rows here)
        generated = Counter(toy.prompts.index(p) for p in trainer.rec.prompts[step])
        assert generated == dict(zip(ids.tolist(), budgets.tolist(), strict=True))
        # the tracker saw one score per completion, in the round's row order
        obs_ids, obs_scores = seen.observed[step]
        assert obs_ids.tolist() == np.repeat(ids, budgets).tolist()
        rewards = trainer.rec.rewards[step][:, 0].numpy()
        np.testing.assert_array_equal(obs_scores, rewards)
        # advantages: (r - mean) / (std + 1e-4) within each variable group
        advantages = trainer.rec.advantages[step].numpy()
        start = 0
        for b in budgets.tolist():
            r = rewards[start : start + b]
            expected = (r - r.mean()) / (np.std(r, ddof=1) + 1e-4)
            np.testing.assert_allclose(advantages[start : start + b], expected, rtol=1e-5, atol=1e-6)
            start += b
        zero_std_rows = sum(
            b
            for b, s in zip(budgets, np.split(rewards, np.cumsum(budgets)[:-1]), strict=True)
            if np.ptp(s) == 0
        )
        assert trainer.state.log_history[step]["frac_reward_zero_std"] == pytest.approx(zero_std_rows / total)
        # each prompt's mean score, averaged over prompts (TRL's reward averages over rows)
        groups = np.split(rewards, np.cumsum(budgets)[:-1])
        prompt_mean = np.mean([g.mean() for g in groups])
        assert trainer.state.log_history[step]["coba/prompt_mean_score"] == pytest.approx(prompt_mean)

    assert seen.allocations[0][1].strategy == "uniform"  # cold start: no pass rates yet (spec §2)
    later = [a.budgets for _, a in seen.allocations[1:]]
    assert all(b.max() > toy.G for b in later), "with pass rates 1, 0, ~0.5, ~0.5 CoBA must move rollouts"
    logged = trainer.state.log_history[1]
    for key in ("coba/budget_mean", "coba/budget_max", "coba/alpha", "coba/alpha_next", "coba/plugin_time_s"):
        assert key in logged
    assert logged["coba/budget_mean"] == toy.G
    later_logs = trainer.state.log_history[1:4]
    assert any(h["coba/prompt_mean_score"] != pytest.approx(h["reward"]) for h in later_logs)
    assert any(k.startswith("coba/budget_hist/") for k in logged)


def test_evaluation_is_stock_trl(make_trainer, grpo_config, toy):
    metrics = []
    for cls in (GRPOTrainer, CobaGRPOTrainer):
        config = grpo_config(per_device_eval_batch_size=8, num_generations_eval=2)
        trainer = make_trainer(cls, config, eval_dataset=toy.dataset())
        result = trainer.evaluate()
        metrics.append({k: v for k, v in result.items() if "time" not in k and "per_second" not in k})
    assert metrics[0] == metrics[1]
    assert "eval_reward" in metrics[1] and not any("coba/" in k for k in metrics[1])


@pytest.mark.parametrize(
    ("config_kwargs", "rounds"),
    [
        (dict(per_device_train_batch_size=8, gradient_accumulation_steps=2), 3),  # 2 buffered batches a round
        (dict(num_iterations=2), 2),  # a round reused for 2 optimiser steps
    ],
    ids=["steps_per_generation=2", "num_iterations=2"],
)
def test_trl_buffering_gets_one_budgeted_round_per_generation(
    make_trainer, grpo_config, toy, config_kwargs, rounds
):
    trainer = make_trainer(
        CobaGRPOTrainer, grpo_config(**config_kwargs), coba_config=CobaConfig(max_rollouts=10)
    )
    seen = spy_allocator(trainer)
    trainer.train()
    assert trainer.state.global_step == 3
    assert len(seen.allocations) == len(seen.observed) == rounds == trainer.allocator.tracker.steps
    for _, allocation in seen.allocations:
        assert allocation.budgets.sum() == len(toy.prompts) * toy.G
    assert seen.allocations[-1][1].budgets.max() > toy.G
