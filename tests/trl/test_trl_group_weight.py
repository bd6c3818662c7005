"""``coba.group_weight`` in `CobaGRPOTrainer`'s advantage replacement: ``equal`` is exactly
``proportional`` when every group has G rows, and otherwise gives every prompt group of a round the same
total advantage weight T / M."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from coba_verl.core import CobaConfig
from coba_verl.core.group_weight import check_aggregation
from coba_verl.trl import CobaGRPOTrainer
from coba_verl.trl.checks import GROUP_WEIGHT_MODES
from coba_verl.trl.trainer import weight_group_advantages


class RecordingCoba(CobaGRPOTrainer):
    """Keeps each training round's budgets and the advantages handed to the loss."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rec = SimpleNamespace(budgets=[], advantages=[], rewards=[])

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.rec.budgets.append(self.last_allocation.budgets.copy())
            self.rec.advantages.append(out["advantages"].clone())
        return out


def _train(make_trainer, grpo_config, coba: CobaConfig, **config: Any) -> RecordingCoba:
    trainer = make_trainer(RecordingCoba, grpo_config(**config), coba_config=coba)
    trainer.train()
    return trainer


def test_equal_under_uniform_takes_the_same_steps_as_proportional(make_trainer, grpo_config):
    runs = {w: _train(make_trainer, grpo_config, CobaConfig(strategy="uniform", group_weight=w)) for w in
            ("proportional", "equal")}  # fmt: skip
    plain, equal = runs["proportional"], runs["equal"]
    assert any(bool(a.abs().sum() > 0) for a in plain.rec.advantages), "the test needs a learning signal"
    for mine, theirs in zip(equal.rec.advantages, plain.rec.advantages, strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(equal.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_equal_gives_every_prompt_group_the_same_weight(make_trainer, grpo_config, toy):
    """Round 1 is a uniform cold start (factor 1, same update), so round 2 draws the same budgets
    and completions under both weightings; only its advantages differ, by (T / M) / B_g."""
    coba = {"max_rollouts": 10}
    plain = _train(make_trainer, grpo_config, CobaConfig(**coba, group_weight="proportional"), max_steps=2)
    equal = _train(make_trainer, grpo_config, CobaConfig(**coba, group_weight="equal"), max_steps=2)
    budgets = equal.rec.budgets[1]
    np.testing.assert_array_equal(budgets, plain.rec.budgets[1])
    assert len(set(budgets.tolist())) > 1, "round 2 must have groups of different sizes"
    t, m = int(budgets.sum()), len(budgets)
    groups = np.repeat(np.arange(m), budgets)  # (T,)
    a_plain, a_equal = plain.rec.advantages[1].double().numpy(), equal.rec.advantages[1].double().numpy()
    factor = (t / m) / budgets[groups]  # (T,)
    np.testing.assert_allclose(a_equal, a_plain * factor, rtol=1e-6, atol=1e-7)
    # the weight each group carries: its rows' factors, summed, the same T / M for every group
    np.testing.assert_allclose(np.bincount(groups, weights=factor), [t / m] * m)
    moved = np.abs(a_plain) > 0
    assert np.any(moved & (factor != 1.0)), "some group with a learning signal must be reweighted"


def test_weight_group_advantages_leaves_proportional_untouched() -> None:
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 2.0])
    assert weight_group_advantages(advantages, np.array([2, 3, 1]), "proportional") is advantages
    weighted = weight_group_advantages(advantages, np.array([2, 3, 1]), "equal")
    torch.testing.assert_close(weighted, advantages * torch.tensor([1, 1, 2 / 3, 2 / 3, 2 / 3, 2.0]))


@pytest.mark.parametrize(
    ("loss_type", "warned"), [("grpo", False), ("sapo", False), ("dapo", True), ("bnpo", True)]
)
def test_equal_says_at_info_where_groups_still_weigh_by_completion_length(caplog, loss_type, warned):
    """``equal`` is the default, so TRL's default ``dapo`` must not warn on every run."""
    with caplog.at_level(logging.INFO, logger="coba_verl.core.group_weight"):
        check_aggregation("equal", loss_type, GROUP_WEIGHT_MODES)
        check_aggregation("proportional", loss_type, GROUP_WEIGHT_MODES)
    records = [r for r in caplog.records if r.name == "coba_verl.core.group_weight"]
    assert {r.levelname for r in records} <= {"INFO"}
    messages = [r.getMessage() for r in records]
    assert len(messages) == int(warned)
    if warned:
        assert f"loss_type={loss_type!r}" in messages[0] and "loss_type='grpo'" in messages[0]


def test_equal_is_refused_under_a_loss_type_it_does_not_know(make_trainer, grpo_config):
    with pytest.raises(ValueError, match="coba.group_weight='equal' is not supported with loss_type='vespo'"):
        make_trainer(
            RecordingCoba, grpo_config(loss_type="vespo"), coba_config=CobaConfig(group_weight="equal")
        )
    check_aggregation("proportional", "vespo", GROUP_WEIGHT_MODES)  # proportional changes nothing
