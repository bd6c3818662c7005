"""``coba.group_weight`` in the classic trainer: `CobaRayPPOTrainer._update_actor` hands veRL's
actor update the advantages times (R / G) / B_g, one session per row; ``proportional`` hands them
on untouched.

The trainer is built through its own constructor from a config translated as ``python -m
coba_verl.main trainer.use_v1=false`` translates it (veRL's dataloader, the CoBA-RL dataloader
wrapper and allocator; no Ray workers: ``init_workers`` is not called). A step is driven through
the two methods ``fit()`` calls, with the rows ``fit()`` gives them: ``_get_gen_batch`` on a
loader batch with uids (ray_trainer.py:1482-1486), then ``_update_actor`` on its B_i rows per
prompt; veRL's own ``RayPPOTrainer._update_actor`` (the call into the actor workers) is replaced
by a recorder. Priors make the first step's budgets uneven. (The classic trainer's whole loop runs
in ``tests/cpu_backend/test_verl_e2e.py``.)
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role

from coba_verl.core import group_weight
from coba_verl.verl_plugin.hooks.classic import CobaRayPPOTrainer, translate_config, weight_advantages

RESPONSE_LENGTH = 5


@pytest.fixture
def actor_inputs(monkeypatch: pytest.MonkeyPatch) -> list[DataProto]:
    """What veRL's own `_update_actor` (the actor workers' update) receives."""
    seen: list[DataProto] = []

    def update(self, batch: DataProto) -> DataProto:
        seen.append(batch)
        return DataProto(meta_info={"metrics": {}})

    monkeypatch.setattr(RayPPOTrainer, "_update_actor", update)
    return seen


@pytest.fixture
def classic_trainer(small_config, tiny_tokenizer, kept_indices, tmp_path, reuse_classic_datasets):
    """A factory of `CobaRayPPOTrainer` built by its constructor, with spread pass-rate priors."""
    priors = tmp_path / "priors.jsonl"
    rates = np.linspace(0.05, 0.95, len(kept_indices))
    priors.write_text("".join(json.dumps({"index": i, "pass_rate": float(p)}) + "\n"
                              for i, p in zip(kept_indices, rates, strict=True)))  # fmt: skip

    def make(weight: str) -> CobaRayPPOTrainer:
        overrides = [f"coba.prior_file={priors}", f"coba.group_weight={weight}"]
        config = small_config("trainer.use_v1=false", "trainer.device=cpu", *overrides)
        translate_config(config)  # as coba_verl.main does before veRL sees a classic config
        return CobaRayPPOTrainer(config, tiny_tokenizer, {Role.ActorRollout: object}, None, device_name="cpu")

    return make


@pytest.fixture
def reuse_classic_datasets(monkeypatch):
    """Read and filter the fixture parquet once per test, however many trainers the test builds."""
    from verl.trainer.ppo import ray_trainer

    real, cache = ray_trainer.create_rl_dataset, {}

    def cached(data_paths, data_config, tokenizer, processor, is_train=True, max_samples=-1):
        key = (tuple(data_paths), is_train, max_samples)
        if key not in cache:
            cache[key] = real(data_paths, data_config, tokenizer, processor, is_train, max_samples)
        return cache[key]

    monkeypatch.setattr(ray_trainer, "create_rl_dataset", cached)


def _step(trainer: CobaRayPPOTrainer) -> tuple[DataProto, torch.Tensor, dict]:
    """One step's calls as ``fit()`` makes them: the batch, its advantages before the group weight
    and the metrics ``_update_actor`` returns."""
    trainer.global_steps = 1  # fit() counts from 1 (ray_trainer.py:1426, 1451)
    batch = DataProto.from_single_dict(next(iter(trainer.train_dataloader)))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    trainer._get_gen_batch(batch)  # allocates, and makes prompt i's row B_i rows of the batch (in place)
    rows = len(batch)
    gen = torch.Generator().manual_seed(0)
    advantages = torch.randn(rows, RESPONSE_LENGTH, generator=gen)  # (R, T) as veRL's GRPO leaves them
    scores = torch.zeros(rows, RESPONSE_LENGTH)
    scores[:, -1] = (torch.rand(rows, generator=gen) < 0.5).float()
    batch.batch["advantages"] = advantages.clone()
    batch.batch["token_level_scores"] = scores
    metrics = trainer._update_actor(batch).meta_info["metrics"]
    return batch, advantages, metrics


def test_equal_gives_every_group_the_same_weight_before_the_actor_update(classic_trainer, actor_inputs):
    batch, before, metrics = _step(classic_trainer("equal"))
    uids = list(batch.non_tensor_batch["uid"])
    sizes = Counter(uids)  # B_g: the rows of each prompt group
    assert len(set(sizes.values())) > 1, "the priors should make the budgets uneven"
    r, g = len(uids), len(sizes)
    factors = torch.tensor([(r / g) / sizes[uid] for uid in uids])  # (R,)
    after = actor_inputs[0].batch["advantages"]
    torch.testing.assert_close(after, before * factors[:, None])
    per_group = {uid: float(factors[[u == uid for u in uids]].sum()) for uid in sizes}
    assert per_group == pytest.approx({uid: r / g for uid in sizes})
    assert "coba/plugin_time_s" in metrics
    assert "coba/failed_rollouts" not in metrics  # a failing session stops the step


def test_proportional_hands_the_advantages_on_untouched(classic_trainer, actor_inputs) -> None:
    batch, before, _ = _step(classic_trainer("proportional"))
    assert len(set(Counter(batch.non_tensor_batch["uid"]).values())) > 1
    assert torch.equal(actor_inputs[0].batch["advantages"], before)


def test_old_spelling_tokens_trains_as_proportional(classic_trainer, actor_inputs, monkeypatch) -> None:
    monkeypatch.setattr(group_weight, "_warned_renames", set())
    with pytest.warns(DeprecationWarning, match="'tokens' is deprecated"):
        trainer = classic_trainer("tokens")
    assert trainer.coba_config.group_weight == "proportional"
    _, before, _ = _step(trainer)
    assert torch.equal(actor_inputs[0].batch["advantages"], before)


def test_equal_under_equal_group_sizes_is_bit_identical() -> None:
    gen = torch.Generator().manual_seed(0)
    batch = DataProto.from_dict(
        tensors={"advantages": torch.randn(8, RESPONSE_LENGTH, generator=gen)},
        non_tensors={"uid": np.array(["a", "b"] * 4, dtype=object)},
    )
    before = batch.batch["advantages"].clone()
    weight_advantages(batch, "equal")
    assert torch.equal(batch.batch["advantages"], before)
