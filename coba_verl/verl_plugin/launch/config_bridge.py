"""From veRL's composed config to a `CobaConfig`, and the configurations CoBA-RL refuses.

`check_config` runs in the driver (``python -m coba_verl.main``, before Ray starts) and again
in `CobaTrainer.__init__` (so the stock ``python -m verl.trainer.main_ppo
trainer.v1.trainer_mode=coba_sync`` route is guarded too). Every refusal says why and what to set.
Its notes (the UserWarning of a knob the strategy ignores, the INFO line on ``loss_agg_mode``) are
said by the first check of a config only: it marks the config (`CHECKED_KEY`), which travels to
veRL's TaskRunner with it, and a marked config is checked in silence.

Every trainer (the three V1 modes and the classic one) is checked for what veRL's own code would
stop on once Ray runs (`check_verl_start`): the conditions of veRL 0.9.1's code, each checked while
that code's source digest is 0.9.1's (`VERL_START_CODE`), and left to veRL otherwise.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from coba_verl.core.config import SIZE_REFILLS_VALUES, CobaConfig, auto_size_refills
from coba_verl.core.group_weight import AggregationModes, check_aggregation
from coba_verl.core.solvers import check_budget
from coba_verl.refusal import CobaRefusal, CobaTypeRefusal
from coba_verl.verl_plugin.launch.verl_start import check_verl_start
from coba_verl.verl_plugin.verl_names import COBA_MODES, coba_mode, verl_mode

logger = logging.getLogger(__name__)

#: veRL 0.9.1's ``actor.loss_agg_mode`` values by what ``coba.group_weight=equal`` does under them.
#: Exact under ``seq-mean-token-mean``: each rollout weighs 1 / R whatever its length, so a group's
#: rollouts, each scaled by (R / G) / B_g, sum to 1 / G. The others weigh each rollout by its token
#: count (token-mean: L_r / T; the others L_r up to a constant): ``equal`` removes the factor B_g,
#: but a group still weighs in proportion to its mean response length, as every group does under
#: uniform GRPO. Accepted, said at INFO (veRL's default ``token-mean`` among them). veRL 0.9.1 has no
#: other mode (``core_algos.agg_loss`` refuses any other name itself), so `check_aggregation`'s
#: refusal only meets a later veRL's new mode.
GROUP_WEIGHT_MODES = AggregationModes(
    setting="actor_rollout_ref.actor.loss_agg_mode",
    exact=("seq-mean-token-mean",),
    by_length=("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
)

#: Advantage estimators whose groups are the prompt uid, so that per-prompt group sizes are
#: meaningful (spec §1: CoBA-RL changes the group size of GRPO and nothing else).
SUPPORTED_ADV_ESTIMATORS: tuple[str, ...] = ("grpo",)


def coba_config_from(config: DictConfig) -> CobaConfig:
    """Build the `CobaConfig` from the ``coba`` node of a veRL config (dataclass defaults if absent),
    ``coba.size_refills=auto`` resolved (`resolve_size_refills`)."""
    node = OmegaConf.select(config, "coba")
    mapping: dict[str, Any] = {} if node is None else OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]
    if "size_refills" in mapping:
        mapping["size_refills"] = resolve_size_refills(config, mapping)
    return CobaConfig.from_mapping(mapping)


#: The ``coba`` group's defaults (its yaml) that differ from `CobaConfig`'s: `coba_config_from`
#: resolves them (``size_refills=auto``: `resolve_size_refills`).
VERL_DEFAULTS: dict[str, Any] = {"size_refills": "auto"}


def resolve_size_refills(config: DictConfig, mapping: dict[str, Any]) -> Any:
    """``coba.size_refills`` as `CobaConfig` takes it: ``auto`` resolved by `auto_size_refills`, DAPO
    being the V1 sync trainer with DAPO dynamic sampling (where C-size works), and off with a
    WARNING under a custom sampler (`custom_sampler_of`: it replaces the replay buffer C-size
    sizes); true and false pass as they are (`check_size_refills` refuses true where C-size cannot
    work).

    Raises:
        CobaTypeRefusal: another string, naming it and the values taken.
    """
    value = mapping["size_refills"]
    if not isinstance(value, str):
        return value
    if value != "auto":
        raise CobaTypeRefusal(
            f"coba.size_refills={value!r} (str) must be one of {', '.join(SIZE_REFILLS_VALUES)}."
        )
    strategy = mapping.get("strategy", CobaConfig.strategy)
    on = auto_size_refills(strategy, dapo=not missing_for_sync_dapo(config))
    sampler = custom_sampler_of(config)
    if on and sampler is not None:
        logger.warning(
            "coba.size_refills=auto resolves to off: %s=%s replaces coba-verl's replay buffer, whose "
            "refills C-size sizes",
            CUSTOM_SAMPLER,
            sampler,
        )
        return False
    return on


#: Where veRL reads a custom sampler (``trainer_base.py:145-151``): one is loaded when ``path`` and
#: ``name`` are both set.
CUSTOM_SAMPLER = "trainer.v1.sampler.custom_sampler"


def custom_sampler_of(config: DictConfig) -> str | None:
    """``path:name`` of the custom sampler veRL builds in place of its replay buffer, or None."""
    custom = OmegaConf.select(config, CUSTOM_SAMPLER, default=None)
    if custom is None or not custom.get("path") or not custom.get("name"):
        return None
    return f"{custom.path}:{custom.name}"


#: Top-level key `check_config` sets (to true) in a config it has passed, so that the next checks
#: of the same config (``prepare_config`` in the driver, the trainer in veRL's TaskRunner) refuse
#: as before but do not say its notes again.
CHECKED_KEY = "coba_checked"


def check_config(config: DictConfig) -> CobaConfig:
    """Refuse veRL configurations under which per-prompt budgets cannot work; return the `CobaConfig`.

    Both trainers are checked here: V1's synchronous trainer (``trainer.use_v1=true``, with or
    without DAPO dynamic sampling) and the classic ``RayPPOTrainer`` (``trainer.use_v1=false``,
    whose own extra rules live in `coba_verl.verl_plugin.hooks.classic`). A config that passes is marked
    with `CHECKED_KEY`; checking a marked config again says no warning or INFO line (`_said_before`),
    so that each is said once a launch.

    Raises:
        ValueError: a V1 trainer mode coba-verl does not support; ``trainer.v1.sync.parameter_sync_step
            > 1``; an asynchronous mode's settings that veRL would stop on inside Ray, or SGLang there
            (`check_verl_start`); a non-GRPO advantage estimator; ``coba.group_weight=equal``
            with a ``loss_agg_mode`` `GROUP_WEIGHT_MODES` does not know; a budget train_batch_size
            * rollout.n that no allocation within [min_rollouts, max_rollouts] can spend;
            ``coba.skip_spread_below`` > 0 or ``coba.size_refills=true`` outside the V1 sync trainer
            with DAPO (`check_skip`, `check_size_refills`).
            `CobaConfig` itself refuses bad ``coba.*`` values (e.g. ``coba.min_rollouts < 2``).
    """
    checked_before = bool(OmegaConf.select(config, CHECKED_KEY, default=False))
    with _said_before() if checked_before else nullcontext():
        cfg = _refusals(config)
    with open_dict(config):
        config[CHECKED_KEY] = True
    return cfg


@contextmanager
def _said_before() -> Iterator[None]:
    """Silence the notes of `check_config`: UserWarnings (`CobaConfig`'s ignored knobs), the INFO
    lines of `coba_verl.core.group_weight` and this module's WARNINGs; its refusals still raise."""
    notes = logging.getLogger(check_aggregation.__module__)
    level, own_level = notes.level, logger.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        notes.setLevel(logging.WARNING)
        logger.setLevel(logging.ERROR)  # `resolve_size_refills`' WARNING under a custom sampler
        try:
            yield
        finally:
            notes.setLevel(level)
            logger.setLevel(own_level)


def _refusals(config: DictConfig) -> CobaConfig:
    """The checks of `check_config`, in order; the `CobaConfig`."""
    cfg = coba_config_from(config)
    if config.trainer.use_v1:
        check_v1_mode(config)
    check_verl_start(config)
    if config.trainer.use_v1:
        check_v1_sessions_differ(config)
    check_budget_unit(config, cfg)
    check_skip(config, cfg)
    check_size_refills(config, cfg)
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in SUPPORTED_ADV_ESTIMATORS:
        raise CobaRefusal(
            f"algorithm.adv_estimator={estimator} is not supported: CoBA-RL sets the GRPO group size of "
            "each prompt and relies on advantages grouped by prompt uid. "
            f"Set algorithm.adv_estimator to one of {SUPPORTED_ADV_ESTIMATORS}."
        )
    check_aggregation(cfg.group_weight, str(config.actor_rollout_ref.actor.loss_agg_mode), GROUP_WEIGHT_MODES)
    m, n = user_batch(config)
    total = m * n
    low, up = cfg.min_rollouts, cfg.max_rollouts
    check_budget(
        m, total, low, up,
        total_name=f"the budget data.train_batch_size * actor_rollout_ref.rollout.n ({m} * {n})",
        low_name="coba.min_rollouts", up_name="coba.max_rollouts",
        fix=f"Set actor_rollout_ref.rollout.n between {low} and {up}, or move coba.min_rollouts / "
        "coba.max_rollouts around it.",
    )  # fmt: skip
    return cfg


def user_batch(config: DictConfig) -> tuple[int, int]:
    """(M, n): ``data.train_batch_size`` and ``rollout.n`` as the user set them.

    The classic trainer's translation (`coba_verl.verl_plugin.hooks.classic.translate_config`) moves
    them into ``coba_classic`` before veRL sees the config; this reads them from there when set.
    """
    kept = OmegaConf.select(config, "coba_classic")
    if kept is not None and kept.get("rollout_n") is not None:
        return int(kept.train_batch_size), int(kept.rollout_n)
    return int(config.data.train_batch_size), int(config.actor_rollout_ref.rollout.n)


def check_v1_mode(config: DictConfig) -> None:
    """Refuse V1 modes whose updates coba-verl cannot size in rollouts (veRL 0.9.1 line numbers).

    ``sync``, ``colocate_async`` and ``separate_async`` are supported: each update trains
    (M / parameter_sync_step) x n rollouts (`CobaReplayBuffer`, `CobaReplayBufferAsync`).

    Raises:
        ValueError: another mode; ``sync.parameter_sync_step > 1``.
    """
    mode = config.trainer.v1.trainer_mode
    if mode not in COBA_MODES and mode not in COBA_MODES.values():
        raise CobaRefusal(
            f"trainer.v1.trainer_mode={mode} is not a veRL V1 mode coba-verl supports: use one of "
            f"{sorted(COBA_MODES)}."
        )
    sync_step = OmegaConf.select(config, "trainer.v1.sync.parameter_sync_step", default=1)
    if int(sync_step) > 1:
        raise CobaRefusal(
            f"trainer.v1.sync.parameter_sync_step={sync_step} is not supported: each local update samples "
            "train_batch_size / parameter_sync_step whole groups (verl/trainer/ppo/v1/trainer_base.py:539, "
            "replay_buffer.py:462), whose rollouts do not add up to (M / k) * rollout.n once budgets "
            "differ, while the update is sized as ppo_mini_batch_size * rollout.n trajectories "
            "(trainer_base.py:1602, 1830). Set trainer.v1.sync.parameter_sync_step=1, or use "
            "actor.ppo_mini_batch_size for several optimizer steps per training batch."
        )


def check_v1_sessions_differ(config: DictConfig) -> None:
    """Refuse ``rollout.full_determinism=true`` in V1, where it makes every group zero-variance.

    veRL 0.9.1's single-turn agent loop gives a session the request id ``det-{priority}`` under full
    determinism (``experimental/agent_loop/single_turn_agent_loop.py:69``), the same for all B_i
    sessions of a prompt, and the router sends one request id to one replica with one seed
    (``router.py:193-197``): the B_i answers come back identical, every group has zero reward
    variance and GRPO trains nothing, silently.

    Raises:
        ValueError: naming the setting and what to set instead.
    """
    if bool(OmegaConf.select(config, "actor_rollout_ref.rollout.full_determinism", default=False)):
        raise CobaRefusal(
            "actor_rollout_ref.rollout.full_determinism=true is refused with per-prompt budgets in the V1 "
            "trainer: veRL 0.9.1 gives every session of a prompt the same request id (det-<priority>, "
            "single_turn_agent_loop.py:69), so its B_i sessions reach one replica with one seed and come "
            "back identical, and every group has zero variance. Set "
            "actor_rollout_ref.rollout.full_determinism=false (seeded sampling still makes runs repeatable "
            "per request)."
        )


def check_skip(config: DictConfig, cfg: CobaConfig) -> None:
    """Refuse ``coba.skip_spread_below`` > 0 outside the V1 sync trainer with DAPO dynamic sampling.

    A skipped prompt is left out of its round (`CobaTrainer._allocate_round`); the sync trainer's
    counted DAPO sampling then fills the step's M x rollout.n rollouts from the other prompts and
    its refills. Without DAPO veRL waits for M groups a step, and the classic and asynchronous
    trainers size or count by groups, so there a round must hold every prompt it drew.

    Raises:
        ValueError: naming the key, its value and the setting that is missing.
    """
    if cfg.skip_spread_below <= 0:
        return
    missing = missing_for_sync_dapo(config)
    if missing:
        raise CobaRefusal(
            f"coba.skip_spread_below={cfg.skip_spread_below} needs the V1 sync trainer with DAPO dynamic "
            f"sampling: a skipped prompt gets no rollouts, and only DAPO's counted sampling fills the step "
            f"without it. Set {missing}, or coba.skip_spread_below=0."
        )


def check_size_refills(config: DictConfig, cfg: CobaConfig) -> None:
    """Refuse ``coba.size_refills=true`` outside the V1 sync trainer with DAPO dynamic sampling, and
    with a custom sampler there (``auto`` resolves to off under one: `resolve_size_refills`).

    C-size (docs/dapo_n16_design.md, amendment 1, item 6) trims the sync trainer's submissions under
    DAPO, its first batch and its refills, to the sessions a step still misses
    (`coba_verl.verl_plugin.hooks.refill_sizing`). Without DAPO there is no refill, and the classic
    and asynchronous trainers generate rounds whole or across steps.

    Raises:
        ValueError: naming the key, its value and the setting that is missing.
    """
    if not cfg.size_refills:
        return
    missing = missing_for_sync_dapo(config)
    if missing:
        raise CobaRefusal(
            f"coba.size_refills=true needs the V1 sync trainer with DAPO dynamic sampling: it sizes the "
            f"refills of DAPO's counted sampling to the rollouts a step still misses. Set {missing}, or "
            "coba.size_refills=false."
        )
    sampler = custom_sampler_of(config)
    if sampler is not None:
        raise CobaRefusal(
            f"coba.size_refills=true cannot size the refills of {CUSTOM_SAMPLER}={sampler}: C-size trims "
            "the submissions of coba-verl's own replay buffer, which the custom sampler replaces. Set "
            f"coba.size_refills=false, or {CUSTOM_SAMPLER}=null."
        )


def missing_for_sync_dapo(config: DictConfig) -> str:
    """The settings the V1 sync trainer with DAPO dynamic sampling needs that ``config`` lacks, joined
    with "and" ("" when none is missing)."""
    dapo = bool(OmegaConf.select(config, "algorithm.filter_groups.enable", default=False))
    sync = bool(config.trainer.use_v1) and verl_mode(config.trainer.v1.trainer_mode) == "sync"  # any name
    needed = (("trainer.use_v1=true with trainer.v1.trainer_mode=sync", sync),
              ("algorithm.filter_groups.enable=true", dapo))  # fmt: skip
    return " and ".join(setting for setting, met in needed if not met)


def check_budget_unit(config: DictConfig, cfg: CobaConfig) -> None:
    """Refuse ``coba.budget_unit=tokens`` where a step's rollouts must add up to M x rollout.n.

    Under a token budget sum_i B_i varies. The V1 sync trainer without DAPO trains whatever was
    generated (``_balance_batch`` pads any count to its mini-batch multiple), so it is supported
    there. DAPO and failed-group refill train exactly M x rollout.n rollouts (`core.trained_budget`),
    a count a token budget does not keep; the classic trainer's batch is sized as M x rollout.n
    rows before generation (`coba_verl.verl_plugin.hooks.classic`).

    Raises:
        ValueError: ``tokens`` with the classic trainer, DAPO, ``sync_refill_failed_groups`` or an
            asynchronous mode (whose updates train M x rollout.n rollouts each).
    """
    if cfg.budget_unit != "tokens":
        return
    dapo = bool(OmegaConf.select(config, "algorithm.filter_groups.enable", default=False))
    refill = bool(OmegaConf.select(config, "trainer.v1.sampler.sync_refill_failed_groups", default=False))
    where = None
    if not config.trainer.use_v1:
        where = "the classic trainer (trainer.use_v1=false): its batch is sized as M x rollout.n rows"
    elif dapo:
        where = (
            "DAPO dynamic sampling (algorithm.filter_groups.enable=true): it trains M x rollout.n rollouts"
        )
    elif refill:
        where = "trainer.v1.sampler.sync_refill_failed_groups=true: it trains M x rollout.n rollouts"
    elif coba_mode(config.trainer.v1.trainer_mode) != COBA_MODES["sync"]:  # check_v1_mode ran before
        mode = config.trainer.v1.trainer_mode
        where = f"trainer.v1.trainer_mode={mode}: each update trains M x rollout.n rollouts"
    if where is not None:
        raise CobaRefusal(
            f"coba.budget_unit=tokens is not supported with {where} a step, while under a token budget "
            "the rollouts of a step vary. Use the V1 sync trainer without DAPO, or coba.budget_unit=rollouts."
        )
