"""Kill-and-resume through TRL's checkpoint folder reproduces the allocations of an uninterrupted run,
whether the checkpoint falls between generation rounds or inside one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from transformers import TrainerCallback

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.records.rounds import Round
from coba_verl.records.saved_state import RunIdentity
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


def record_rounds(trainer: CobaGRPOTrainer) -> list[tuple[int, dict[int, int]]]:
    """Every generation round of the trainer as (optimiser steps done before it, {prompt id: B_i})."""
    out: list[tuple[int, dict[int, int]]] = []
    plan_round = trainer._plan_round

    def spy(inputs):
        plan = plan_round(inputs)
        budgets = dict(zip(plan.ids.tolist(), plan.allocation.budgets.tolist(), strict=True))
        out.append((trainer.state.global_step, budgets))
        return plan

    trainer._plan_round = spy
    return out


KILL = 3  # of 6 steps


@pytest.mark.slow
@pytest.mark.parametrize(
    "round_kwargs",
    [{}, dict(num_iterations=2), dict(per_device_train_batch_size=8, steps_per_generation=2)],
    ids=["between-rounds", "inside-a-round-num_iterations=2", "inside-a-round-steps_per_generation=2"],
)
def test_kill_and_resume_reproduces_the_allocations(make_trainer, grpo_config, tmp_path, toy, round_kwargs):
    def config(out: str):
        saving = dict(save_strategy="steps", save_steps=KILL)
        return grpo_config(output_dir=str(tmp_path / out), max_steps=6, **saving, **round_kwargs)

    coba = CobaConfig(max_rollouts=10)
    full = make_trainer(CobaGRPOTrainer, config("full"), coba_config=coba)
    full_rounds = record_rounds(full)
    full.train()

    kill = KillAfterSave(KILL)
    killed = make_trainer(CobaGRPOTrainer, config("killed"), coba_config=coba, callbacks=[kill])
    killed_rounds = record_rounds(killed)
    with pytest.raises(Killed):
        killed.train()
    checkpoint = tmp_path / "killed" / f"checkpoint-{KILL}"
    assert (checkpoint / STATE_FILE).exists()

    resumed = make_trainer(CobaGRPOTrainer, config("killed"), coba_config=coba)
    resumed_rounds = record_rounds(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    # The resumed run starts with the round the kill fell in (TRL regenerates it) with that
    # round's budgets, then generates the later rounds at the uninterrupted run's steps.
    current = [budgets for start, budgets in full_rounds if start <= KILL][-1]
    assert killed_rounds == [r for r in full_rounds if r[0] < KILL]
    assert resumed_rounds == [(KILL, current)] + [r for r in full_rounds if r[0] > KILL]
    # a tracker that had not been restored would start cold, i.e. uniform
    assert all(max(b.values()) > toy.G for _, b in resumed_rounds)
    # every round observed once: the regenerated one is not counted again
    assert resumed.allocator.tracker.steps == full.allocator.tracker.steps == len(full_rounds)


#: A run's identity as `run_identity` gives it (ids, prompt text; a model built from a config has no path).
IDENTITY = RunIdentity("abc", "content", None)


def load(folder, allocator: BudgetAllocator, identity: RunIdentity):
    return load_allocator(str(folder), allocator, identity=identity, id_column="prompt_id")


def test_allocator_file_round_trips_and_refuses_another_training_set(tmp_path):
    allocator = BudgetAllocator(CobaConfig(), num_prompts=5)
    allocator.observe([0, 0, 3, 3, 3], [1.0, 0.0, 1.0, 1.0, 0.0])
    allocator.end_step()
    unfinished = Round(ids=np.array([3, 0, 4]), allocation=allocator.allocate([3, 0, 4], 12))
    allocator.observe([1, 1], [1.0, 1.0])  # pending, not yet committed
    save_allocator(str(tmp_path), allocator, identity=IDENTITY, trl_step=7, unfinished=unfinished)

    restored = BudgetAllocator(CobaConfig(), num_prompts=5)
    resumed = load(tmp_path, restored, IDENTITY)
    assert resumed is not None and resumed.trl_step == 7
    np.testing.assert_array_equal(resumed.unfinished.ids, unfinished.ids)
    np.testing.assert_equal(
        dataclasses.asdict(resumed.unfinished.allocation), dataclasses.asdict(unfinished.allocation)
    )
    # the same prompts in another order (a resume past the first epoch) get the same budgets each
    reordered = resumed.unfinished.for_ids(np.array([0, 4, 3]))
    np.testing.assert_array_equal(reordered.budgets, unfinished.allocation.budgets[[1, 2, 0]])
    np.testing.assert_array_equal(reordered.pass_rates, unfinished.allocation.pass_rates[[1, 2, 0]])
    assert resumed.unfinished.for_ids(np.array([0, 1, 3])) is None
    ids = np.arange(5)
    np.testing.assert_array_equal(restored.tracker.pass_rates(ids), allocator.tracker.pass_rates(ids))
    assert restored.end_step() == allocator.end_step()
    np.testing.assert_array_equal(restored.allocate(ids, 20).budgets, allocator.allocate(ids, 20).budgets)

    save_allocator(str(tmp_path), allocator, identity=IDENTITY, trl_step=8)
    assert load(tmp_path, restored, IDENTITY).unfinished is None
    other = BudgetAllocator(CobaConfig(), num_prompts=5)
    with pytest.raises(ValueError, match=r"different set of train_dataset column 'prompt_id' values"):
        load(tmp_path, other, RunIdentity("xyz", "content", None))
    with pytest.raises(ValueError, match=r"different prompt text under them"):
        load(tmp_path, other, RunIdentity("abc", "other", None))
    assert other.tracker.steps == 0  # nothing was loaded before the refusal
    assert load(tmp_path / "missing", restored, IDENTITY) is None


def test_a_side_file_of_another_format_is_refused_naming_the_file(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(b"PK not a real npz")
    with pytest.raises(ValueError, match=r"not of format 1 .*coba_allocator.npz: resume with the train"):
        load(tmp_path, BudgetAllocator(CobaConfig(), num_prompts=5), IDENTITY)
