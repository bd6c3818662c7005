"""GRPO update through veRL's registries, and a training loop that learns a trivial task."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from coba_verl.arithmetic.model import response_logprobs
from coba_verl.arithmetic.task import Split
from coba_verl.arithmetic.tokenizer import build_tokenizer, encode_prompts
from coba_verl.arithmetic.warmstart import encode_answers
from coba_verl.lab import runner
from coba_verl.lab.composition import PASS_BINS, pass_histogram
from coba_verl.lab.config import LabConfig, RunSpec
from coba_verl.lab.grpo import (
    RolloutBatch,
    grpo_update,
    make_actor_config,
    outcome_rewards,
    zero_gradient_groups,
)
from coba_verl.lab.runner import train_run
from coba_verl.lab.seeds import build_context, new_model

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "warm_steps": 0}


def test_outcome_reward_sits_on_the_last_response_token() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    r = outcome_rewards(np.array([1.0, 0.5], dtype=np.float32), mask)
    assert r.tolist() == [[0, 0, 1.0, 0], [0.5, 0, 0, 0]]


def test_zero_gradient_groups_counts_groups_that_all_pass_or_all_fail() -> None:
    index = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3])
    scores = np.array([1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0], dtype=np.float32)
    assert zero_gradient_groups(scores, index) == (2, 4)
    # interleaved rows of the same group are still one group
    assert zero_gradient_groups(scores[::-1].copy(), index[::-1].copy()) == (2, 4)


def _batch(tok, n: int = 6) -> RolloutBatch:
    p_ids, p_mask = encode_prompts(tok, ["1+2="] * n)
    r_ids, r_mask = encode_answers(tok, ["3", "4", "3", "5", "3", "9"][:n])
    return RolloutBatch(
        p_ids, p_mask, r_ids, r_mask,
        scores=np.array([1, 0, 1, 0, 1, 0], dtype=np.float32)[:n], index=np.array([0, 0, 0, 0, 1, 1])[:n],
    )  # fmt: skip


def test_update_uses_the_policy_loss_registered_in_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []
    vanilla = core_algos.get_policy_loss_fn("vanilla")

    def recording(**kw):
        calls.append(kw)
        return vanilla(**kw)

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "lab_test_rec", recording)
    cfg = LabConfig(**TINY)
    tok = build_tokenizer()
    model = new_model(cfg, tok, 0)
    actor = make_actor_config(
        rollout_n=4, mini_batch_size=6, clip_ratio_low=0.2, clip_ratio_high=0.28, loss_mode="lab_test_rec"
    )
    before = [p.detach().clone() for p in model.parameters()]
    metrics = grpo_update(model, torch.optim.AdamW(model.parameters(), lr=1e-2), _batch(tok), actor)
    assert len(calls) == 1
    # veRL's GRPO advantage: group 0 has scores [1, 0, 1, 0] -> +-1/std, group 1 has [1, 0]
    adv = calls[0]["advantages"][:, 0]
    expected0 = (torch.tensor([1.0, 0, 1, 0]) - 0.5) / (torch.tensor([1.0, 0, 1, 0]).std() + 1e-6)
    expected1 = (torch.tensor([1.0, 0]) - 0.5) / (torch.tensor([1.0, 0]).std() + 1e-6)
    torch.testing.assert_close(adv, torch.cat([expected0, expected1]))
    assert calls[0]["loss_agg_mode"] == "token-mean" and calls[0]["config"] is actor
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert {"actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"} <= set(metrics)


def test_mini_batches_take_one_optimiser_step_each_and_clip_against_the_old_policy() -> None:
    cfg = LabConfig(**TINY)
    tok = build_tokenizer()
    model = new_model(cfg, tok, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-2)
    steps = []
    opt.register_step_post_hook(lambda *_: steps.append(1))
    actor = make_actor_config(rollout_n=4, mini_batch_size=2, clip_ratio_low=0.2, clip_ratio_high=0.28)
    metrics = grpo_update(model, opt, _batch(tok), actor)
    assert len(steps) == 3
    assert metrics["actor/ppo_kl"] != 0.0  # later mini-batches see a policy that has moved


_PROMPTS = [f"{d}+0=" for d in range(10)]


def _constant_task_context(cfg: LabConfig):
    """Prompts 'd+0=' whose answer is always '7'; the warm start only teaches 'one digit, then <eos>'."""
    train = Split(_PROMPTS, ["7"] * 10, np.zeros(10, dtype=np.int64))
    return build_context(cfg, 0, train, train, _format_only_state())


@functools.cache
def _format_only_state() -> dict[str, torch.Tensor]:
    cfg = LabConfig(**TINY)
    prompts = _PROMPTS
    tok = build_tokenizer()
    model = new_model(cfg, tok, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    p_ids, p_mask = encode_prompts(tok, prompts * 8)
    for _ in range(40):  # random digits as targets: the format, not the answer
        a_ids, a_mask = encode_answers(tok, [str(d) for d in rng.integers(0, 10, size=80)])
        loss = -(response_logprobs(model, p_ids, p_mask, a_ids, a_mask) * a_mask).sum() / a_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_grpo_loop_learns_a_trivially_learnable_task() -> None:
    cfg = LabConfig(
        **TINY, runs=["uniform"], n_train=10, n_eval=10, steps=40, prompts_per_step=10, rollouts_per_prompt=8,
        eval_every=40, eval_samples=2, lr=3e-3,
    )  # fmt: skip
    ctx = _constant_task_context(cfg)
    rows: list[dict] = []
    train_run(cfg, ctx, RunSpec("uniform"), rows.append)
    first = np.mean([r["train_acc"] for r in rows[:5]])
    last = np.mean([r["train_acc"] for r in rows[-5:]])
    assert first < 0.3, first  # the warm start does not know the answer
    assert last > 0.8, (first, last)
    assert rows[-1]["eval_acc"] > 0.8


def test_zero_learning_rate_leaves_reward_flat() -> None:
    """The control for the test above: the same loop without updates does not improve."""
    cfg = LabConfig(
        **TINY, runs=["uniform"], n_train=10, n_eval=10, steps=40, prompts_per_step=10, rollouts_per_prompt=8,
        eval_every=40, eval_samples=2, lr=1e-12, weight_decay=0.0,
    )  # fmt: skip
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec("uniform"), rows.append)
    assert np.mean([r["train_acc"] for r in rows[-5:]]) < 0.3


@pytest.mark.parametrize("strategy", ["coba", "coba_release", "knapsack", "static"])
def test_allocating_strategies_move_budget_once_pass_rates_exist_and_spend_it_exactly(strategy: str) -> None:
    cfg = LabConfig(
        **TINY, runs=[strategy], n_train=10, n_eval=10, steps=12, prompts_per_step=5, rollouts_per_prompt=8,
        eval_every=12, eval_samples=1, lr=3e-3,
    )  # fmt: skip
    rows: list[dict] = []
    snaps: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec(strategy), rows.append, snapshot=snaps.append)
    assert all(r["rollouts"] == 40 * r["step"] for r in rows)
    assert all(r["budget_max"] == r["budget_min"] == 8 for r in rows if r["epoch"] == 1)  # no history yet
    assert any(r["budget_max"] > r["budget_min"] for r in rows if r["epoch"] >= 2)
    assert snaps and all(sum(s["budgets"]) == 40 and min(s["budgets"]) >= 2 for s in snaps)


@pytest.mark.parametrize(("strategy", "uses_beta"), [("uniform", False), ("knapsack", False), ("coba", True)])
def test_alpha_is_logged_only_when_a_beta_shaped_the_budgets(strategy: str, uses_beta: bool) -> None:
    """Also runs through an explicit ``device`` (CPU here; the same path puts the model on ``cuda``)."""
    cfg = LabConfig(
        **TINY, runs=[strategy], n_train=10, n_eval=10, steps=6, prompts_per_step=5, rollouts_per_prompt=4,
        eval_every=6, eval_samples=1, device="cpu",
    )  # fmt: skip
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec(strategy), rows.append)
    assert all(np.isnan(r["alpha"]) and np.isnan(r["beta"]) for r in rows if r["epoch"] == 1)  # cold start
    later = [r for r in rows if r["epoch"] >= 2]
    if uses_beta:
        assert all(r["alpha"] + r["beta"] == pytest.approx(11.0) for r in later)  # kappa
    else:
        assert all(np.isnan(r["alpha"]) for r in later)


def test_static_strategy_logs_its_fixed_beta() -> None:
    cfg = LabConfig(
        **TINY, runs=["static"], n_train=10, n_eval=10, steps=4, prompts_per_step=5, rollouts_per_prompt=4,
        eval_every=4, eval_samples=1, coba={"static_alpha": 3.0, "static_beta": 5.0},
    )  # fmt: skip
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec("static"), rows.append)
    assert [(r["alpha"], r["beta"]) for r in rows if r["epoch"] == 2] == [(3.0, 5.0)] * 2


def test_fail_rate_and_pass_histogram_describe_the_batch() -> None:
    cfg = LabConfig(
        **TINY, runs=["uniform"], n_train=10, n_eval=10, steps=4, prompts_per_step=5, rollouts_per_prompt=4,
        eval_every=4, eval_samples=1,
    )  # fmt: skip
    rows: list[dict] = []
    train_run(cfg, _constant_task_context(cfg), RunSpec("uniform"), rows.append)
    for i, r in enumerate(rows):
        assert r["fail_rate"] == pytest.approx(1 - r["batch_pass_rate"])
        assert r["fail_rate_avg3"] == pytest.approx(
            np.mean([x["fail_rate"] for x in rows[max(0, i - 2) : i + 1]])
        )
        assert sum(r["pass_hist"]) == 5
        assert r["pass_hist"][0] / 5 == pytest.approx(r["all_fail_share"])


def test_pass_histogram_bins_zero_quarters_and_one() -> None:
    rates = np.array([0.0, 0.1, 0.25, 0.5, 0.74, 0.99, 1.0, 1.0])
    assert pass_histogram(rates) == [1, 1, 1, 2, 1, 2]
    assert len(PASS_BINS) == 6


def test_updates_per_step_sets_the_number_of_optimiser_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = runner.grpo_update

    def spy(model, opt, batch, actor, **kw):
        seen.append(-(-len(batch.scores) // actor.ppo_mini_batch_size))
        return real(model, opt, batch, actor, **kw)

    monkeypatch.setattr(runner, "grpo_update", spy)
    cfg = LabConfig(
        **TINY, runs=["uniform@0.5"], n_train=10, n_eval=10, steps=2, prompts_per_step=5,
        rollouts_per_prompt=8,
        eval_every=2, eval_samples=1, updates_per_step=2,
    )  # fmt: skip
    train_run(cfg, _constant_task_context(cfg), RunSpec("uniform", 0.5), lambda r: None)
    assert seen == [2, 2]
