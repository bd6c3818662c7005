"""``coba.group_weight`` in the classic trainer: `CobaRayPPOTrainer._update_actor` hands veRL's
actor update the advantages times (R / G) / B_g, one session per row; ``tokens`` hands them on
untouched. (The classic trainer's whole loop runs in ``tests/cpu_backend/test_verl_e2e.py``.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.verl_plugin.classic import CobaRayPPOTrainer, weight_advantages

# rows of three prompt groups, interleaved as veRL's _balance_batch may leave them: sizes 3, 1, 4
UIDS = ["a", "b", "c", "a", "c", "a", "c", "c"]
SIZES = {"a": 3, "b": 1, "c": 4}


def _batch(seed: int = 0) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    advantages = torch.randn(len(UIDS), 5, generator=gen)  # (R, T)
    scores = torch.zeros(len(UIDS), 5)
    scores[:, -1] = torch.tensor([1.0, 0, 1, 0, 0, 1, 1, 0])
    return DataProto.from_dict(
        tensors={"advantages": advantages, "token_level_scores": scores},
        non_tensors={"uid": np.array(UIDS, dtype=object)},
    )


def _trainer(group_weight: str) -> CobaRayPPOTrainer:
    """The trainer's state `_update_actor` reads, without veRL's workers."""
    trainer = object.__new__(CobaRayPPOTrainer)
    trainer.coba_config = CobaConfig(group_weight=group_weight)
    allocator = BudgetAllocator(trainer.coba_config, num_prompts=3)
    trainer.train_dataloader = SimpleNamespace(allocator=allocator)
    trainer._allocation = allocator.allocate(np.arange(3), len(UIDS))
    trainer._pending = {uid: (i, SIZES[uid]) for i, uid in enumerate(SIZES)}
    trainer._plugin_time_s = 0.0
    trainer.global_steps = 1
    return trainer


@pytest.fixture
def actor_inputs(monkeypatch: pytest.MonkeyPatch) -> list[DataProto]:
    """What veRL's own `_update_actor` receives."""
    seen: list[DataProto] = []

    def update(self, batch: DataProto) -> DataProto:
        seen.append(batch)
        return DataProto(meta_info={"metrics": {}})

    monkeypatch.setattr(RayPPOTrainer, "_update_actor", update)
    return seen


def test_tokens_hands_the_advantages_on_untouched(actor_inputs) -> None:
    batch = _batch()
    before = batch.batch["advantages"].clone()
    _trainer("tokens")._update_actor(batch)
    assert torch.equal(actor_inputs[0].batch["advantages"], before)


def test_equal_gives_every_group_the_same_weight_before_the_actor_update(actor_inputs) -> None:
    batch = _batch()
    before = batch.batch["advantages"].clone()
    output = _trainer("equal")._update_actor(batch)
    after = actor_inputs[0].batch["advantages"]
    r, g = len(UIDS), len(SIZES)
    factors = torch.tensor([(r / g) / SIZES[uid] for uid in UIDS])  # (R,)
    torch.testing.assert_close(after, before * factors[:, None])
    per_group = {uid: float(factors[[u == uid for u in UIDS]].sum()) for uid in SIZES}
    assert per_group == pytest.approx({uid: r / g for uid in SIZES})
    assert "coba/plugin_time_s" in output.meta_info["metrics"]
    assert "coba/failed_rollouts" not in output.meta_info["metrics"]  # a failing session stops the step


def test_equal_under_equal_group_sizes_is_bit_identical() -> None:
    batch = _batch()
    batch.non_tensor_batch["uid"] = np.array(["a", "b"] * 4, dtype=object)
    before = batch.batch["advantages"].clone()
    weight_advantages(batch, "equal")
    assert torch.equal(batch.batch["advantages"], before)
