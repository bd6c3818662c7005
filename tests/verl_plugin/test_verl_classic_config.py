"""The classic trainer's row translation (`coba_verl.verl_plugin.hooks.classic.translate_config`).

What ``python -m coba_verl.main trainer.use_v1=false`` hands to veRL: the user's (M prompts,
rollout.n = n) as M·n rows of one sample each, mini-batches scaled so that every optimizer step
sees what it sees under ``rollout.n = n``, and veRL's own ``validate_config`` passing on them.
The trainer itself runs in ``tests/cpu_backend/test_verl_e2e.py``.
"""

from __future__ import annotations

import copy

import pytest
from omegaconf import OmegaConf

from coba_verl.verl_plugin.hooks.classic import CLASSIC_NODE, translate_config
from coba_verl.verl_plugin.launch.config_bridge import user_batch


@pytest.fixture(scope="module")
def classic_1x8(coba_compose, gpu_1x8):
    return coba_compose([*gpu_1x8, "trainer.use_v1=false"])


def test_translation_turns_prompts_times_n_into_rows_and_keeps_the_users_values(classic_1x8):
    config = copy.deepcopy(classic_1x8)
    translate_config(config)
    assert config.actor_rollout_ref.rollout.n == 1
    assert config.data.gen_batch_size == 64 and config.data.train_batch_size == 64 * 16
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 16 * 16
    assert config.critic.ppo_mini_batch_size == 16 * 16  # veRL's default interpolates the actor's: once
    assert config[CLASSIC_NODE].rollout_n == 16 and config[CLASSIC_NODE].train_batch_size == 64
    assert user_batch(config) == (64, 16)  # what the allocator spends: M prompts, M * n rollouts


def test_translation_is_idempotent(classic_1x8):
    config = copy.deepcopy(classic_1x8)
    translate_config(config)
    once = OmegaConf.to_container(config)
    translate_config(config)
    assert OmegaConf.to_container(config) == once


def test_translated_config_passes_veRLs_own_validate_config(classic_1x8):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = copy.deepcopy(classic_1x8)
    translate_config(config)
    use_critic, use_reference = need_critic(config), need_reference_policy(config)
    validate_config(config, use_reference_policy=use_reference, use_critic=use_critic)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("algorithm.filter_groups.enable", True, "Set trainer.use_v1=true for DAPO"),
        ("trainer.critic_warmup", 2, "trainer.critic_warmup=2 is not supported"),
        ("data.gen_batch_size", 128, "data.gen_batch_size=128 with trainer.use_v1=false"),
    ],
)
def test_what_the_classic_fit_cannot_hold_is_refused_with_the_fix(classic_1x8, key, value, message):
    config = copy.deepcopy(classic_1x8)
    OmegaConf.update(config, key, value, force_add=True)
    with pytest.raises(ValueError, match=message):
        translate_config(config)
    assert config.actor_rollout_ref.rollout.n == 16  # nothing half-translated
