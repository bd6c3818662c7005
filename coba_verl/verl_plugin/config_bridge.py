"""From veRL's composed config to a `CobaConfig`, and the configurations CoBA-RL refuses.

`check_config` runs twice: in the driver (``python -m coba_verl.main``, before Ray starts) and
in `CobaTrainer.__init__` (so the stock ``python -m verl.trainer.main_ppo
trainer.v1.trainer_mode=coba_sync`` route is guarded too). Every refusal says why and what to set.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from coba_verl.core.config import CobaConfig

#: Name under which `CobaTrainer` is registered in veRL's trainer registry. veRL's trainer base
#: treats every mode other than ``sync`` as asynchronous, so `CobaTrainer` resets the config to
#: ``sync`` before veRL reads it; this name only selects the class in ``TaskRunnerV1``.
COBA_TRAINER_MODE = "coba_sync"

#: Advantage estimators whose groups are the prompt uid, so that per-prompt group sizes are
#: meaningful (spec §1: CoBA-RL changes the group size of GRPO and nothing else).
SUPPORTED_ADV_ESTIMATORS: tuple[str, ...] = ("grpo",)


def coba_config_from(config: DictConfig) -> CobaConfig:
    """Build the `CobaConfig` from the ``coba`` node of a veRL config (dataclass defaults if absent)."""
    node = OmegaConf.select(config, "coba")
    mapping: dict[str, Any] = {} if node is None else OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]
    return CobaConfig.from_mapping(mapping)


def check_config(config: DictConfig) -> CobaConfig:
    """Refuse veRL configurations under which per-prompt budgets cannot work; return the `CobaConfig`.

    Raises:
        ValueError: legacy trainer (``trainer.use_v1=false``); a trainer mode other than ``sync``;
            DAPO group filtering or failed-group refill (both switch veRL to one-prompt
            submissions, so no batch is left to allocate over); a non-GRPO advantage estimator;
            ``coba.min_rollouts < 2``; a budget train_batch_size * rollout.n that no allocation
            within [min_rollouts, max_rollouts] can spend.
    """
    cfg = coba_config_from(config)

    if not config.trainer.use_v1:
        raise ValueError(
            "trainer.use_v1=false (the legacy RayPPOTrainer) is not supported by coba-verl: its fit() "
            "repeats every prompt rollout.n times in two inline places, so per-prompt budgets would need "
            "a copy of fit(). Set trainer.use_v1=true (veRL's default trainer since 0.8)."
        )
    mode = config.trainer.v1.trainer_mode
    if mode not in ("sync", COBA_TRAINER_MODE):
        raise ValueError(
            f"trainer.v1.trainer_mode={mode} is not supported: CoBA-RL allocates one budget over each "
            "training batch before it is generated, which only the synchronous trainer submits as a "
            "whole. Set trainer.v1.trainer_mode=sync."
        )
    filter_groups = OmegaConf.select(config, "algorithm.filter_groups.enable")
    if filter_groups:
        raise ValueError(
            "algorithm.filter_groups.enable=true is not supported: DAPO group filtering makes veRL submit "
            "prompts one at a time (gen_batch_size=1), so there is no batch to allocate a budget over. "
            "Set algorithm.filter_groups.enable=false."
        )
    if OmegaConf.select(config, "trainer.v1.sampler.sync_refill_failed_groups"):
        raise ValueError(
            "trainer.v1.sampler.sync_refill_failed_groups=true is not supported: it makes veRL submit "
            "prompts one at a time (gen_batch_size=1), so there is no batch to allocate a budget over. "
            "Set trainer.v1.sampler.sync_refill_failed_groups=false."
        )
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in SUPPORTED_ADV_ESTIMATORS:
        raise ValueError(
            f"algorithm.adv_estimator={estimator} is not supported: CoBA-RL sets the GRPO group size of "
            "each prompt and relies on advantages grouped by prompt uid. "
            f"Set algorithm.adv_estimator to one of {SUPPORTED_ADV_ESTIMATORS}."
        )
    if cfg.min_rollouts < 2:
        raise ValueError(
            f"coba.min_rollouts={cfg.min_rollouts} is below 2: under GRPO a group of one rollout has no "
            "baseline, so its advantage would be its raw score. Set coba.min_rollouts=2 or more."
        )
    m = int(config.data.train_batch_size)
    n = int(config.actor_rollout_ref.rollout.n)
    total = m * n
    low, up = cfg.min_rollouts, cfg.max_rollouts
    if not m * low <= total <= m * up:
        raise ValueError(
            f"the budget data.train_batch_size * actor_rollout_ref.rollout.n = {m} * {n} = {total} is "
            f"infeasible for M={m} prompts with coba.min_rollouts={low}, coba.max_rollouts={up}: need "
            f"{m * low} <= total <= {m * up}. Set actor_rollout_ref.rollout.n between {low} and {up}, "
            "or move coba.min_rollouts / coba.max_rollouts around it."
        )
    return cfg


def check_total(budgets_sum: int, num_prompts: int, rollout_n: int) -> None:
    """Refuse an allocation whose sum differs from M * rollout.n.

    veRL sizes mini-batches, dispatch chunks, sequence balancing and its own validate_config for
    train_batch_size * rollout.n trajectories per step; CoBA-RL only moves rollouts between prompts.
    """
    expected = num_prompts * rollout_n
    if budgets_sum != expected:
        raise ValueError(
            f"the allocation spends {budgets_sum} rollouts but the submitted batch of M={num_prompts} "
            f"prompts must get exactly M * actor_rollout_ref.rollout.n = {num_prompts} * {rollout_n} = "
            f"{expected}, which every fixed-size step of veRL assumes. Keep the allocator's total at "
            "M * rollout.n (change rollout.n to change the budget)."
        )
