"""C-size in veRL's sync trainer (``coba.size_refills``): the sizing rule, the slots it fills, and
the prompts it puts back into the round's rest, through a checkpoint (no Ray; the run through veRL's
``fit()`` is in test_verl_trainer_loop.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from verl.utils import tensordict_utils as tu

from coba_verl.core.wave_sizing import size_submission
from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.hooks.refill_sizing import RefillSizer
from coba_verl.verl_plugin.hooks.trainer import CobaTrainer

SIZED = (
    "algorithm.filter_groups.enable=true",
    "algorithm.filter_groups.metric=reward",
    "coba.size_refills=true",
)


@pytest.mark.parametrize(
    ("budgets", "slots", "low", "expected", "trimmed"),
    [
        ([4, 4, 4], 12, 2, (4, 4, 4), 0),  # exactly fitting: whole
        ([4, 4, 4], 100, 2, (4, 4, 4), 0),  # room to spare: whole
        ([4, 4, 4], 8, 2, (4, 4), 0),  # fits exactly after two: the third goes back whole
        ([4, 4, 4], 9, 2, (4, 4, 2), 2),  # 1 left: the last keeps B_low (overshoot 1 = B_low - 1)
        ([4, 4, 4], 10, 2, (4, 4, 2), 2),
        ([4, 4, 4], 11, 2, (4, 4, 3), 1),
        ([8, 2, 5], 7, 2, (7,), 1),  # the first prompt already reaches the slots
        ([4, 4, 4], 1, 2, (2,), 2),  # slots below B_low: one prompt of B_low
        ([4, 4, 4], 1, 3, (3,), 1),
        ([2, 6], 1, 3, (2,), 0),  # never above a prompt's own budget
        ([4, 4, 4], 0, 2, (), 0),  # no slot: nothing
        ([4, 4, 4], -5, 2, (), 0),
        ([], 10, 2, (), 0),
    ],
)
def test_size_submission_trims_in_order_to_the_slots(budgets, slots, low, expected, trimmed):
    sized = size_submission(budgets, slots, low)
    assert sized.budgets == expected
    assert sized.trimmed == trimmed
    assert sized.prompts == len(expected)


@given(
    budgets=st.lists(st.integers(2, 16), max_size=12),
    slots=st.integers(-8, 120),
    low=st.integers(2, 6),
)
def test_size_submission_overshoots_by_less_than_b_low_and_keeps_an_untrimmed_prefix(budgets, slots, low):
    budgets = [max(b, low) for b in budgets]  # an allocation never gives less than B_low
    sized = size_submission(budgets, slots, low)
    k = sized.prompts
    assert list(sized.budgets[:-1]) == budgets[: max(k - 1, 0)]  # only the last one is trimmed
    assert sized.trimmed == (budgets[k - 1] - sized.budgets[-1] if k else 0) >= 0
    if slots <= 0 or not budgets:
        assert k == 0
        return
    assert k >= 1 and sized.budgets[-1] >= min(low, budgets[k - 1])
    assert sum(sized.budgets[:-1]) < slots  # every prompt taken had a slot left for it
    assert sum(sized.budgets) <= max(slots, 0) + low - 1
    if k < len(budgets) or sized.trimmed:
        assert sum(sized.budgets) >= slots  # trimmed or stopped only once the slots are full


def test_slots_left_counts_the_budgets_in_flight_not_the_groups():
    budgets = {"a": 7, "b": 2}
    sizer = RefillSizer(2, budgets.get, rollouts_per_prompt=4)
    assert sizer.slots_left(16, 3, []) == 13
    assert sizer.slots_left(16, 3, ["a", "b"]) == 4
    assert sizer.slots_left(16, 3, ["a", "b", "unknown"]) == 0  # a group it does not know: rollout.n
    assert sizer.slots_left(16, 12, ["a"]) == -3


def prompts(index: list[int], budgets: list[int]):
    return tu.get_tensordict(
        {
            "index": torch.as_tensor(index),
            "__rollout_n__": torch.as_tensor(budgets, dtype=torch.int64),
            "uid": np.array([f"u{i}" for i in index], dtype=object),
        }
    )


def test_the_first_submission_has_the_whole_target_and_a_refill_its_open_slots():
    sizer = RefillSizer(2, {}.get, rollouts_per_prompt=4)
    loader = SimpleNamespace(round_rest=prompts([9], [5]))
    first = sizer.size(prompts([1, 2, 3, 4], [6, 4, 3, 3]), loader, target=16)
    assert first["__rollout_n__"].tolist() == [6, 4, 3, 3]  # fits M x n: untouched
    with sizer.submitting(7):
        refill = sizer.size(prompts([5, 6, 7], [3, 6, 2]), loader, target=16)
    assert sizer.slots is None
    assert [int(i) for i in refill["index"]] == [5, 6] and refill["__rollout_n__"].tolist() == [3, 4]
    assert refill["__rollout_n__"].dtype == torch.int64
    # the prompt not submitted goes back first, with its allocated budget, before the round's rest
    assert [int(i) for i in loader.round_rest["index"]] == [7, 9]
    assert loader.round_rest["__rollout_n__"].tolist() == [2, 5]
    assert list(loader.round_rest["uid"]) == ["u7", "u9"]
    assert sizer.pop_trimmed() == 2 and sizer.pop_trimmed() == 0
    with pytest.raises(ValueError, match="slots=0"), sizer.submitting(0):
        pass


def test_a_refill_that_bypasses_the_sizing_is_said_once(caplog):
    sizer = RefillSizer(2, {}.get, rollouts_per_prompt=4)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with sizer.submitting(3):
                pass  # a refill_fn that never asked the trainer for prompts
    assert sum("was not sized" in record.getMessage() for record in caplog.records) == 1


@pytest.mark.usefixtures("reuse_datasets")
def test_prompts_put_back_survive_a_checkpoint_with_their_budgets(small_config, tiny_tokenizer, tmp_path):
    """The put-back prompts wait in ``round_rest``, which data.pt holds: a resumed trainer submits
    them first, with the budgets their round gave them."""

    def trainer_with_history():
        trainer = CobaTrainer(small_config(*SIZED))
        trainer.tokenizer, trainer.processor = tiny_tokenizer, None
        trainer._init_dataloader()
        trainer.global_steps = 1  # fit() sets it
        return trainer

    trainer = trainer_with_history()
    sizer = trainer.replay_buffer.sizer
    assert isinstance(sizer, RefillSizer)
    loader = trainer.train_dataloader
    first = trainer._next_train_batch()  # the step's first submission: the whole round of M = 4
    assert first["__rollout_n__"].tolist() == [4, 4, 4, 4]  # cold start: uniform
    with sizer.submitting(6):
        refill = trainer._next_train_batch(4)  # a new round: 6 slots take 4 + 2
    assert refill["__rollout_n__"].tolist() == [4, 2] and sizer.trimmed == 2
    rest = list(
        zip(map(int, loader.round_rest["index"]), loader.round_rest["__rollout_n__"].tolist(), strict=True)
    )
    assert len(rest) == 2 and all(b == 4 for _, b in rest)
    # the put-back prompts carry the budget of their round: give them distinct ones to see it travel
    loader.round_rest["__rollout_n__"] = torch.as_tensor([3, 5], dtype=torch.int64)
    torch.save(loader.state_dict(), tmp_path / "data.pt")  # as veRL's _save_checkpoint

    resumed = trainer_with_history()
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    batch = resumed._next_train_batch()  # the next step's first submission: the rest first
    drawn = list(zip(map(int, batch["index"]), batch["__rollout_n__"].tolist(), strict=True))
    assert drawn[:2] == [(rest[0][0], 3), (rest[1][0], 5)]
    assert len(drawn) == 4  # then two of the next round; 3 + 5 + 4 + 4 = 16 fits M x n whole


@pytest.mark.usefixtures("reuse_datasets")
@pytest.mark.parametrize("sized", [False, True])
def test_uniform_counts_rollouts_only_when_its_refills_are_sized(small_config, sized):
    """Uniform keeps veRL's sampling by groups, unless size_refills trims its groups below n: then
    the step counts rollouts, as every other strategy does under DAPO."""
    buffer = CobaTrainer(
        small_config(*SIZED[:2], "coba.strategy=uniform", f"coba.size_refills={sized}")
    ).replay_buffer
    assert (buffer.rollouts_per_prompt, buffer.sizer is not None) == ((4, True) if sized else (None, False))


CUSTOM_SAMPLER = '''
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer


class CustomSampler(ReplayBuffer):
    """A user's sampler, built by veRL in place of its replay buffer."""
'''


@pytest.fixture
def custom_sampler(tmp_path) -> tuple[str, ...]:
    """Overrides that make veRL build `CustomSampler` (``trainer_base.py:145-151``) in place of its buffer."""
    path = tmp_path / "sampler.py"
    path.write_text(CUSTOM_SAMPLER)
    return (
        f"trainer.v1.sampler.custom_sampler.path={path}",
        "trainer.v1.sampler.custom_sampler.name=CustomSampler",
    )


@pytest.mark.usefixtures("reuse_datasets")
@pytest.mark.parametrize("where", ["driver", "trainer"])
def test_size_refills_true_with_a_custom_sampler_is_refused_in_one_line(small_config, custom_sampler, where):
    """Before Ray (the driver's `check_config`) and again when the trainer is built."""
    from coba_verl.verl_plugin.launch.config_bridge import check_config

    with pytest.raises(CobaRefusal) as refused:
        (check_config if where == "driver" else CobaTrainer)(small_config(*SIZED, *custom_sampler))
    path = custom_sampler[0].split("=", 1)[1]
    assert str(refused.value) == (
        f"coba.size_refills=true cannot size the refills of trainer.v1.sampler.custom_sampler={path}:"
        "CustomSampler: C-size trims the submissions of coba-verl's own replay buffer, which the custom "
        "sampler replaces. Set coba.size_refills=false, or trainer.v1.sampler.custom_sampler=null."
    )


@pytest.mark.usefixtures("reuse_datasets")
@pytest.mark.parametrize(("setting", "warned"), [("auto", 1), ("false", 0)])
def test_size_refills_auto_with_a_custom_sampler_is_off_with_a_warning_naming_it(
    small_config, tiny_tokenizer, custom_sampler, setting, warned, caplog
):
    """coba under DAPO in the sync trainer, where auto would size the refills: a custom sampler cannot
    be sized, so auto resolves to off, said once; the step's first submission goes out unsized."""
    bridge = "coba_verl.verl_plugin.launch.config_bridge"
    with caplog.at_level(logging.WARNING, logger=bridge):
        trainer = CobaTrainer(small_config(*SIZED[:2], f"coba.size_refills={setting}", *custom_sampler))
    path = custom_sampler[0].split("=", 1)[1]
    warning = (
        f"coba.size_refills=auto resolves to off: trainer.v1.sampler.custom_sampler={path}:CustomSampler "
        "replaces coba-verl's replay buffer, whose refills C-size sizes"
    )
    assert [r.getMessage() for r in caplog.records if r.name == bridge] == [warning] * warned
    assert trainer.coba_config.size_refills is False
    assert type(trainer.replay_buffer).__name__ == "CustomSampler"
    assert getattr(trainer.replay_buffer, "sizer", None) is None
    trainer.tokenizer, trainer.processor = tiny_tokenizer, None
    trainer._init_dataloader()
    trainer.global_steps = 1
    assert trainer._next_train_batch(3)["__rollout_n__"].tolist() == [4, 4, 4]  # asked for, none trimmed


def test_auto_off_under_a_custom_sampler_is_said_once_by_the_driver_not_again_by_the_trainer(
    small_config, custom_sampler, caplog
):
    """The driver's check says it; the trainer's check of the same (marked) config inside Ray does not."""
    from coba_verl.verl_plugin.launch.config_bridge import check_config

    bridge = "coba_verl.verl_plugin.launch.config_bridge"
    config = small_config(*SIZED[:2], "coba.size_refills=auto", *custom_sampler)
    with caplog.at_level(logging.WARNING, logger=bridge):
        first, second = check_config(config), check_config(config)
    assert first.size_refills is False and second.size_refills is False
    said = [r.getMessage() for r in caplog.records if r.name == bridge]
    assert len(said) == 1 and said[0].startswith("coba.size_refills=auto resolves to off")
