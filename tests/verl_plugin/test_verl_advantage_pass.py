"""The group weight inside veRL's V1 advantage pass (`coba_verl.verl_plugin.hooks.advantage`), on a real
TransferQueue over a local 2-CPU Ray.

One step's trajectories are put as veRL's agent loop leaves them: three prompt groups of 3, 5 and 2
sessions (one session of two outputs, a multi-turn one) and a padding row. The weighted pass
(`weighted_advantage_pass`, one write) must give bit for bit what veRL's own ``_compute_advantage``
followed by the read-scale-write route gives, under veRL's plain GRPO, with the KL penalty in the
reward and with the rollout correction, and must write TransferQueue once.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from coba_verl.verl_plugin.hooks.advantage import (
    VERL_ADVANTAGE_SHA256,
    advantage_route,
    group_weight_of_keys,
    weight_written_advantages,
    weighted_advantage_pass,
)
from coba_verl.verl_plugin.hooks.trainer import (
    CobaBudgets,
    CobaColocateAsyncTrainer,
    CobaSeparateAsyncTrainer,
    CobaTrainer,
)
from coba_verl.verl_plugin.hooks.verl_guards import source_sha256

# (key, response length, score): groups a (3 sessions, session 1 of two outputs), b (5), c (2)
ROWS = [
    ("a_0_0", 5, 1.0), ("a_1_0", 3, 0.0), ("a_1_1", 4, 0.0), ("a_2_0", 6, 1.0),
    ("b_0_0", 2, 0.0), ("b_1_0", 7, 1.0), ("b_2_0", 4, 0.0), ("b_3_0", 3, 0.0), ("b_4_0", 5, 0.0),
    ("c_0_0", 4, 1.0), ("c_1_0", 6, 0.0),
    ("pad0_0_0", 3, 0.0),
]  # fmt: skip
KEYS = [key for key, _, _ in ROWS]
TAGS = [{"status": "success", "is_padding": key.startswith("pad")} for key in KEYS]
WRITTEN = ("advantages", "returns", "token_level_rewards", "rollout_is_weights", "response_mask")

#: veRL's branches of the pass, and the fields each writes back
BYPASS = "algorithm.rollout_correction.bypass_mode=true"
SETTINGS = {
    "grpo": ([BYPASS], {"advantages", "returns"}),
    "kl_in_reward": (
        [BYPASS, "algorithm.use_kl_in_reward=true"],
        {"advantages", "returns", "token_level_rewards"},
    ),
    "rollout_correction": ([], {"advantages", "returns", "response_mask"}),
    "rollout_is_token": (
        ["algorithm.rollout_correction.rollout_is=token"],
        {"advantages", "returns", "response_mask", "rollout_is_weights"},
    ),
}


def step_fields():
    """The step's fields as veRL's agent loop and workers put them (nested responses)."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for key, length, score in ROWS:
        reward = torch.zeros(length)
        reward[-1] = score
        rows.append(
            {
                "uid": key.split("_", 1)[0],
                "response_mask": torch.ones(length, dtype=torch.int64),
                "rm_scores": reward,
                "rollout_log_probs": -torch.rand(length, generator=gen),
                "old_log_probs": -torch.rand(length, generator=gen),
                "ref_log_prob": -torch.rand(length, generator=gen),
            }
        )
    return list_of_dict_to_tensordict(rows)


def stand_in(coba_compose, overrides: list[str]) -> SimpleNamespace:
    """What veRL's pass reads from the trainer: the composed config and the reward's KL controller."""
    config = coba_compose(["transfer_queue.backend.SimpleStorage.num_data_storage_units=1", *overrides])
    return SimpleNamespace(
        config=config, kl_ctrl_in_reward=core_algos.get_kl_controller(config.algorithm.kl_ctrl)
    )


def put_step(tq):
    """The step's fields alone, as the agent loop left them (what an earlier pass wrote is cleared);
    returns veRL's batch meta."""
    tq.kv_clear(keys=KEYS, partition_id="train")
    tq.kv_batch_put(keys=KEYS, partition_id="train", fields=step_fields(), tags=TAGS)
    return tq.kv_batch_put(keys=KEYS, partition_id="train", tags=TAGS)


def written(tq) -> dict[str, list[torch.Tensor]]:
    """The fields an advantage pass writes, row by row, as the actor will read them."""
    data = tq.kv_batch_get(keys=KEYS, partition_id="train")
    return {f: list(data[f].unbind()) for f in WRITTEN if f in data.keys()}


def record_puts(tq, monkeypatch) -> list[set[str]]:
    """The field names of every TransferQueue write from now on, one set per write."""
    puts: list[set[str]] = []
    put = tq.kv_batch_put

    def recorded(*args, **kwargs):
        fields = kwargs.get("fields")
        puts.append(set(fields.keys()) if fields is not None else set())
        return put(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_put", recorded)
    return puts


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_weight_inside_veRLs_pass_equals_weighting_after_it_with_one_write(
    setting, transfer_queue, coba_compose, monkeypatch
):
    tq = transfer_queue
    overrides, fields = SETTINGS[setting]
    trainer = stand_in(coba_compose, overrides)
    factors = group_weight_of_keys(KEYS, TAGS, "equal")
    # R = 10 sessions, G = 3 groups: (10 / 3) / B_g; both outputs of a_1 share a's; padding keeps 1
    expected = [10 / 9] * 4 + [10 / 15] * 5 + [10 / 6] * 2 + [1.0]
    assert factors.tolist() == pytest.approx(expected)

    meta = put_step(tq)
    verl_metrics: dict = {}
    verl_puts = record_puts(tq, monkeypatch)
    PPOTrainer._compute_advantage(trainer, meta, verl_metrics)
    monkeypatch.undo()
    unweighted = written(tq)
    weight_written_advantages(meta, factors)
    after = written(tq)

    meta = put_step(tq)
    inside_puts = record_puts(tq, monkeypatch)
    inside_metrics: dict = {}
    weighted_advantage_pass(trainer, meta, inside_metrics, factors)
    monkeypatch.undo()
    inside = written(tq)

    assert verl_puts == inside_puts == [fields], "one write, of the fields veRL's pass writes"
    for field in inside:
        for row, (x, y) in enumerate(zip(inside[field], after[field], strict=True)):
            assert torch.equal(x, y), (field, KEYS[row])
    assert inside_metrics.keys() == verl_metrics.keys()
    for name, value in verl_metrics.items():
        assert np.array_equal(np.asarray(inside_metrics[name]), np.asarray(value)), name
    # the factor is there: veRL's advantages times it, veRL's returns untouched
    for row, factor in enumerate(factors):
        scaled = unweighted["advantages"][row] * torch.tensor(factor, dtype=torch.float32)
        assert torch.equal(inside["advantages"][row], scaled), KEYS[row]
        assert torch.equal(inside["returns"][row], unweighted["returns"][row]), KEYS[row]
    assert any(
        not torch.equal(a, b) for a, b in zip(inside["advantages"], unweighted["advantages"], strict=True)
    )


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_factors_of_one_give_veRLs_pass_exactly(setting, transfer_queue, coba_compose, monkeypatch):
    tq = transfer_queue
    overrides, fields = SETTINGS[setting]
    trainer = stand_in(coba_compose, overrides)
    meta = put_step(tq)
    PPOTrainer._compute_advantage(trainer, meta, {})
    verl = written(tq)
    meta = put_step(tq)
    puts = record_puts(tq, monkeypatch)
    weighted_advantage_pass(trainer, meta, {}, np.ones(len(KEYS)))
    monkeypatch.undo()
    ours = written(tq)
    assert puts == [fields]
    for field in verl:
        assert all(torch.equal(x, y) for x, y in zip(ours[field], verl[field], strict=True)), field


def test_every_coba_trainer_takes_the_inside_route_on_veRL_0_9_1():
    assert source_sha256(PPOTrainer._compute_advantage) == VERL_ADVANTAGE_SHA256
    for cls in (CobaTrainer, CobaColocateAsyncTrainer, CobaSeparateAsyncTrainer):
        bases = cls.__mro__[cls.__mro__.index(CobaBudgets) + 1 :]  # what CobaBudgets' super() reaches
        verl_method = next(
            base.__dict__["_compute_advantage"] for base in bases if "_compute_advantage" in base.__dict__
        )
        assert advantage_route(verl_method) == "inside", cls.__name__


def test_a_changed_veRL_advantage_pass_takes_the_after_route():
    class PatchedTrainer(PPOTrainer):
        def _compute_advantage(self, batch, metrics):  # a veRL whose pass differs
            return super()._compute_advantage(batch, metrics)

    assert advantage_route(PatchedTrainer._compute_advantage) == "after"
    assert advantage_route(len) == "after"  # not veRL's method at all

    @functools.wraps(PPOTrainer._compute_advantage)
    def traced(self, batch, metrics):  # a wrapper: inspect would show veRL's source through it
        return PPOTrainer._compute_advantage(self, batch, metrics)

    assert advantage_route(traced) == "after"


def verl_method_from_source(folder: Path, old: str, new: str) -> Callable:
    """veRL's ``PPOTrainer._compute_advantage`` as a patched veRL would ship it: its source text, with
    ``old`` replaced by ``new``, in a class of a module file of its own (so that inspect reads it)."""
    source = inspect.getsource(PPOTrainer.__dict__["_compute_advantage"])  # indented, as in its class
    assert old in source
    path = folder / "patched_trainer_base.py"
    path.write_text("from __future__ import annotations\n\n\nclass PPOTrainer:\n" + source.replace(old, new))
    spec = importlib.util.spec_from_file_location("patched_trainer_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PPOTrainer.__dict__["_compute_advantage"]


@pytest.mark.parametrize(
    ("old", "new", "route"),
    [
        ("", "", "inside"),  # veRL 0.9.1's text, from another file: the digest is of the text
        (  # one default changed, as a veRL patch release might
            'get("norm_adv_by_std_in_grpo", True)',
            'get("norm_adv_by_std_in_grpo", False)',
            "after",
        ),
        ("# 3. compute advantages", "# 3. compute the advantages", "after"),  # a comment: still another text
    ],
    ids=["unchanged", "a_default_changed", "a_comment_changed"],
)
def test_veRLs_own_method_with_another_source_takes_the_after_route(tmp_path, monkeypatch, old, new, route):
    """The digest decides where the method is veRL's own: a veRL whose ``_compute_advantage`` is not
    0.9.1's text gets the after route in every CoBA trainer, though no class overrides the method."""
    monkeypatch.setattr(
        trainer_base.PPOTrainer, "_compute_advantage", verl_method_from_source(tmp_path, old, new)
    )
    assert advantage_route(PPOTrainer.__dict__["_compute_advantage"]) == route
    for cls in (CobaTrainer, CobaColocateAsyncTrainer, CobaSeparateAsyncTrainer):
        bases = cls.__mro__[cls.__mro__.index(CobaBudgets) + 1 :]
        verl_method = next(
            base.__dict__["_compute_advantage"] for base in bases if "_compute_advantage" in base.__dict__
        )
        assert verl_method is PPOTrainer.__dict__["_compute_advantage"]  # veRL's own, not an override
        assert advantage_route(verl_method) == route, cls.__name__
