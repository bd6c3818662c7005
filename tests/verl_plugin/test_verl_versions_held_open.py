"""``coba/versions_held_open``: the policy versions F_bar waits for at a step's end, against what the
tracker then averages. An async trainer's ``step`` (veRL's own step replaced: no Ray, no update) with
groups left open in the ledger at known versions and one scored rollout of each version 1..t (one
version left unscored in two cases)."""

from __future__ import annotations

import numpy as np
import pytest
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

from coba_verl.verl_plugin.hooks.trainer import HELD_OPEN_LIMIT, CobaColocateAsyncTrainer


@pytest.mark.usefixtures("reuse_datasets")
@pytest.mark.parametrize(
    ("bound", "open_versions", "step", "unscored", "held", "averaged"),
    [
        ("null", [], 6, None, 0, (1, 2, 3, 4, 5, 6)),  # nothing in flight: every version complete
        ("null", [5, 3], 6, None, 4, (1, 2)),  # the oldest group in flight is of version 3: 3-6 held
        ("null", [5, 3], 6, 5, 4, (1, 2)),  # version 5 has no scored rollout yet: waited for all the same
        ("2", [5, 3], 6, None, 3, (1, 2, 3)),  # 3 steps behind a bound of 2: 3 settled, 4, 5, 6 held
        ("2", [5, 3], 6, 5, 3, (1, 2, 3)),
        ("2", [4], 6, None, 3, (1, 2, 3)),  # exactly the bound behind: still waited for
        ("null", [1], 12, None, HELD_OPEN_LIMIT + 1, (1, 2, 3)),  # null bound: HELD_OPEN_LIMIT = 8, 4-12
    ],
)
def test_versions_held_open_counts_the_versions_f_bar_leaves_out(
    bound, open_versions, step, unscored, held, averaged, small_config, tiny_tokenizer, monkeypatch
):
    """A version F_bar waits for is held open whether or not a rollout of it was scored yet."""
    monkeypatch.setattr(PPOTrainerColocateAsync, "step", lambda self, metrics, timing_raw: None)
    trainer = CobaColocateAsyncTrainer(
        small_config(
            "trainer.v1.trainer_mode=colocate_async",
            "coba.window=20",
            f"trainer.v1.sampler.max_off_policy_threshold={bound}",
        )
    )
    trainer.tokenizer, trainer.processor = tiny_tokenizer, None
    trainer._init_dataloader()
    trainer.global_steps = step
    versions = np.array([v for v in range(1, step + 1) if v != unscored])
    trainer.allocator.observe(
        np.zeros(versions.size, dtype=np.int64), np.ones(versions.size), versions=versions
    )
    for n, version in enumerate(open_versions):
        trainer.ledger.open_group(f"g{n}", prompt_id=0, budget=4, version=version)
    metrics: dict = {}
    trainer.step(metrics, {})
    assert metrics["coba/versions_held_open"] == held
    assert trainer.allocator.tracker.f_bar_versions == averaged
    assert len(averaged) + held == step  # every version up to the step: averaged or waited for
