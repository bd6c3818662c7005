"""The allocator's state in OpenRLHF's checkpoint ``client_states``: a resume allocates as the run would.

OpenRLHF's own save and load (`BasePPOTrainer.save_logs_and_checkpoints`, `init_checkpoint_states`)
are replaced by a dict here; the real round trip through DeepSpeed runs in test_openrlhf_e2e.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.records.saved_state import RunIdentity


def trainer(orl, allocator, fingerprint="f", model=None):
    from coba_verl.openrlhf.trainer import CobaPPOTrainerClass

    obj = object.__new__(CobaPPOTrainerClass)
    obj.allocator, obj.coba_id_key = allocator, "prompt_id"
    obj.coba_identity = RunIdentity(fingerprint, "prompts", model)
    return obj


def steps(allocator, rng, count):
    """``count`` steps over 6 prompts: allocate 24 samples, observe 0/1 scores; the budgets of each."""
    out = []
    ids = np.arange(6)
    p = np.array([0.0, 0.1, 0.4, 0.5, 0.9, 1.0])
    for _ in range(count):
        budgets = allocator.allocate(ids, 24).budgets
        rollout_ids = np.repeat(ids, budgets)
        allocator.observe(rollout_ids, (rng.random(rollout_ids.size) < p[rollout_ids]).astype(float))
        allocator.end_step()
        out.append(budgets.tolist())
    return out


@pytest.fixture
def upstream_store(orl, monkeypatch):
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    store = {}
    monkeypatch.setattr(
        BasePPOTrainer, "save_logs_and_checkpoints", lambda self, step, logs, states: store.update(states)
    )
    monkeypatch.setattr(BasePPOTrainer, "init_checkpoint_states", lambda self: dict(store))
    return store


def test_resume_reproduces_the_allocations(orl, upstream_store):
    config = CobaConfig(max_rollouts=12)
    run = BudgetAllocator(config, 6)
    first = steps(run, np.random.default_rng(0), 3)
    trainer(orl, run).save_logs_and_checkpoints(3, {}, {"global_step": 3})
    after = steps(run, np.random.default_rng(1), 3)

    resumed = BudgetAllocator(config, 6)
    states = trainer(orl, resumed).init_checkpoint_states()
    assert states["global_step"] == 3
    assert steps(resumed, np.random.default_rng(1), 3) == after
    assert len({tuple(b) for b in first + after}) > 1  # the budgets did move


def test_resume_on_another_prompt_set_is_refused(orl, upstream_store):
    trainer(orl, BudgetAllocator(CobaConfig(), 6), "a").save_logs_and_checkpoints(1, {}, {"global_step": 1})
    with pytest.raises(ValueError, match="different set of --data.prompt_dataset column 'prompt_id' values"):
        trainer(orl, BudgetAllocator(CobaConfig(), 6), "b").init_checkpoint_states()


def test_resume_with_another_model_is_refused(orl, upstream_store):
    saved = {"path": "/models/a", "fingerprint": "1"}
    trainer(orl, BudgetAllocator(CobaConfig(), 6), model=saved).save_logs_and_checkpoints(1, {}, {})
    other = {"path": "/models/b", "fingerprint": "2"}
    with pytest.raises(ValueError, match="model '/models/a'.*'/models/b' holds another model"):
        trainer(orl, BudgetAllocator(CobaConfig(), 6), model=other).init_checkpoint_states()


def test_a_state_of_another_format_is_refused_with_how_to_start_fresh(orl, upstream_store):
    upstream_store["coba_allocator"] = '{"fingerprint": "f", "state": {}}'  # an older version's JSON
    with pytest.raises(ValueError, match=r"not of format 1 .*start without --ckpt.load_enable"):
        trainer(orl, BudgetAllocator(CobaConfig(), 6)).init_checkpoint_states()


def test_a_resume_mismatch_in_the_ray_actor_is_one_refusal_line_at_the_entry_point(
    orl, tiny_run, upstream_store, monkeypatch, capsys, tmp_path
):
    """OpenRLHF reads the checkpoint in the trainer actor's ``fit``, after Ray and the models started,
    and Ray re-raises the actor's error as ``RayTaskError(ResumeMismatch)``, whose str is the remote
    traceback. ``python -m coba_verl.openrlhf.train`` prints the mismatch's own message as one line."""
    import runpy

    from ray.exceptions import RayTaskError

    from coba_verl.openrlhf.train import main

    trainer(orl, BudgetAllocator(CobaConfig(), 6), "a").save_logs_and_checkpoints(1, {}, {"global_step": 1})
    with pytest.raises(ValueError) as raised:
        trainer(orl, BudgetAllocator(CobaConfig(), 6), "b").init_checkpoint_states()
    mismatch = raised.value
    carried = RayTaskError("PPOTrainer.fit", "Traceback (most recent call last): ...", mismatch)

    def train_ppo_ray(*args, **kwargs):  # OpenRLHF's CLI, up to ray.get(ppo_trainer.fit.remote())
        raise carried.as_instanceof_cause()

    monkeypatch.setattr(runpy, "run_module", train_ppo_ray)
    paths = {"model": tmp_path / "m", "data": tmp_path / "d.jsonl", "reward": tmp_path / "r.py"}
    with pytest.raises(SystemExit) as exit_info:
        main([*tiny_run.openrlhf_flags(paths, tmp_path), "--ckpt.load_enable"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"coba-verl: {mismatch}"]
    assert "different set of --data.prompt_dataset column 'prompt_id' values" in err[0]
    assert "start without --ckpt.load_enable" in err[0]
