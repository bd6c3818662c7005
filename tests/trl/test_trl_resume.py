"""Kill-and-resume through TRL's checkpoint folder reproduces the allocations of an uninterrupted run."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import TrainerCallback

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.trl import CobaGRPOTrainer
from coba_verl.trl.checkpoint import STATE_FILE, load_allocator, save_allocator


class Killed(Exception):
    """Stands in for the process dying right after a checkpoint was written."""


class KillAfterSave(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Killed(f"killed after saving step {self.step}")


def record_budgets(trainer: CobaGRPOTrainer) -> list[dict[int, int]]:
    """Every allocation of the trainer as {prompt id: B_i}, in step order."""
    out: list[dict[int, int]] = []
    allocate = trainer.allocator.allocate

    def spy(ids, total):
        result = allocate(ids, total)
        out.append(dict(zip(np.asarray(ids).tolist(), result.budgets.tolist(), strict=True)))
        return result

    trainer.allocator.allocate = spy
    return out


@pytest.mark.slow
def test_kill_and_resume_reproduces_the_allocations(make_trainer, grpo_config, tmp_path, toy):
    def config(out: str):
        return grpo_config(output_dir=str(tmp_path / out), max_steps=6, save_strategy="steps", save_steps=3)

    coba = CobaConfig(max_rollouts=10)
    full = make_trainer(CobaGRPOTrainer, config("full"), coba_config=coba)
    full_budgets = record_budgets(full)
    full.train()

    killed = make_trainer(CobaGRPOTrainer, config("killed"), coba_config=coba, callbacks=[KillAfterSave(3)])
    killed_budgets = record_budgets(killed)
    with pytest.raises(Killed):
        killed.train()
    checkpoint = tmp_path / "killed" / "checkpoint-3"
    assert (checkpoint / STATE_FILE).exists()

    resumed = make_trainer(CobaGRPOTrainer, config("killed"), coba_config=coba)
    resumed_budgets = record_budgets(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    assert killed_budgets == full_budgets[:3]
    assert resumed_budgets == full_budgets[3:]
    # a tracker that had not been restored would start cold, i.e. uniform
    assert all(max(b.values()) > toy.G for b in resumed_budgets)
    assert resumed.allocator.tracker.steps == full.allocator.tracker.steps == 6


def test_allocator_file_round_trips_and_refuses_another_training_set(tmp_path):
    allocator = BudgetAllocator(CobaConfig(), num_prompts=5)
    allocator.observe([0, 0, 3, 3, 3], [1.0, 0.0, 1.0, 1.0, 0.0])
    allocator.end_step()
    allocator.observe([1, 1], [1.0, 1.0])  # pending, not yet committed
    save_allocator(str(tmp_path), allocator, fingerprint="abc", id_column="prompt_id")

    restored = BudgetAllocator(CobaConfig(), num_prompts=5)
    assert load_allocator(str(tmp_path), restored, fingerprint="abc")
    ids = np.arange(5)
    np.testing.assert_array_equal(restored.tracker.pass_rates(ids), allocator.tracker.pass_rates(ids))
    assert restored.end_step() == allocator.end_step()
    np.testing.assert_array_equal(restored.allocate(ids, 20).budgets, allocator.allocate(ids, 20).budgets)

    with pytest.raises(
        ValueError, match=r"'prompt_id' ids differ from this run's \(id-map fingerprint mismatch\)"
    ):
        load_allocator(str(tmp_path), BudgetAllocator(CobaConfig(), num_prompts=5), fingerprint="xyz")
    assert not load_allocator(str(tmp_path / "missing"), restored, fingerprint="abc")
