"""The start-up conditions of veRL 0.9.1's ``separate_async`` trainer, checked before Ray.

`separate_async_unfit` lists, for `coba_verl.verl_plugin.launch.verl_start.check_verl_start`, what
``PPOTrainerSeparateAsync`` and the code it starts would stop on inside Ray: the batch against its
local updates, the standalone rollout pool and its engines, a checkpoint engine that can send weights
to that pool (not ``naive``: the refusal names the engines that load here, or what to install for
one), the reward model's own pool, the hybrid switch's settings and its
disaggregated rollout (which veRL ignores, with a warning, without hybrid replicas), and an actor
strategy whose old policy can be kept. Each rule is checked while its veRL code is 0.9.1's
(`verl_code_is_known`).
"""

from __future__ import annotations

import functools
import logging

from omegaconf import DictConfig, OmegaConf

from coba_verl.cpu.launcher import cpu_backend_enabled
from coba_verl.verl_plugin.launch.trainer_start import (
    Unfit,
    own_pool_fix,
    rollout_engine,
    shown,
    standalone_engine_fit,
)
from coba_verl.verl_plugin.launch.verl_code import verl_code_is_known

logger = logging.getLogger(__name__)

#: ``actor.strategy`` values whose weights veRL's ``DetachActorWorker`` can snapshot to host memory
#: for the old policy of ``separate_async``'s local updates (``engine_workers.py:86-108``).
SNAPSHOT_STRATEGIES = ("fsdp", "fsdp2", "veomni", "megatron")


def separate_async_unfit(config: DictConfig) -> list[Unfit]:
    """What ``PPOTrainerSeparateAsync`` and the code it starts would stop on (`check_verl_start`).

    On the CPU backend (``coba_cpu.enable``) the checkpoint engine and the pool's engine size are
    the launcher's (`coba_verl.cpu.launcher.standalone_rollout_slots`: ``naive`` becomes its
    ``ray_object_store``, one ``hf`` server a slot).
    """
    on_cpu = cpu_backend_enabled(config)
    unfit: list[Unfit] = []
    rollout = config.actor_rollout_ref.rollout
    if verl_code_is_known("separate_async"):
        unfit += _sync_step_unfit(config)
        unfit += _pool_unfit(config, on_cpu)
        backend = OmegaConf.select(rollout, "checkpoint_engine.backend")
        if backend == "naive" and not on_cpu:
            _, fix, words = standalone_engine_fit()
            unfit.append(
                Unfit(
                    "actor_rollout_ref.rollout.checkpoint_engine.backend=naive cannot send weights to a "
                    f"standalone rollout pool (trainer_separate_async.py:68-70); of veRL's engines, {words}",
                    fix,
                )
            )
        reward_model = config.reward.reward_model
        if bool(reward_model.enable) and not bool(reward_model.enable_resource_pool):
            pool = own_pool_fix(config)
            unfit.append(
                Unfit(
                    "reward.reward_model.enable=true needs the reward model in its own pool "
                    f"(reward.reward_model.nnodes={shown(reward_model.get('nnodes'))} x n_gpus_per_node="
                    f"{shown(reward_model.get('n_gpus_per_node'))}, both above 0: trainer_base.py:824-827), "
                    "since the standalone rollout never pauses to free memory "
                    "(trainer_separate_async.py:71-76)",
                    ("reward.reward_model.enable_resource_pool=true", *pool),
                )
            )
        switch = f"{SWITCH}.enable_switch"
        disaggregated = bool(OmegaConf.select(rollout, "disaggregation.enabled", default=False))
        if bool(OmegaConf.select(config, switch, default=False)) and not bool(
            OmegaConf.select(config, "actor_rollout_ref.hybrid_engine", default=True)
        ):
            _say_switch_ignored()  # veRL turns it off (trainer_separate_async.py:89-94)
        elif bool(OmegaConf.select(config, switch, default=False)) and disaggregated:
            unfit.append(
                Unfit(
                    f"{switch}=true does not work with actor_rollout_ref.rollout.disaggregation.enabled=true "
                    "(trainer_separate_async.py:97-104)",
                    (f"{switch}=false",),
                )
            )
    if verl_code_is_known("hybrid_rollout"):
        unfit += _switch_unfit(config)
    bypass = bool(OmegaConf.select(config, "algorithm.rollout_correction.bypass_mode", default=False))
    strategy = OmegaConf.select(config, "actor_rollout_ref.actor.strategy")
    if not bypass and strategy not in SNAPSHOT_STRATEGIES and verl_code_is_known("old_policy_snapshot"):
        unfit.append(
            Unfit(
                f"actor_rollout_ref.actor.strategy={strategy} cannot keep the old policy of the local "
                "updates in host memory: veRL's DetachActorWorker does it for "
                f"{', '.join(SNAPSHOT_STRATEGIES)} only, and fails at the first local update, as it saves "
                "the old policy (engine_workers.py:86-108, trainer_separate_async.py:202-203)",
                ("actor_rollout_ref.actor.strategy=fsdp2",),
            )
        )
    return unfit


#: veRL's settings of ``separate_async``'s hybrid switch (``HybridRolloutSwitchConfig``).
SWITCH = "trainer.v1.separate_async.hybrid_rollout"


@functools.cache
def _say_switch_ignored() -> None:
    """veRL's own warning, said before Ray: the switch lends the training devices' rollout replicas,
    and without them (``actor_rollout_ref.hybrid_engine=false``) veRL turns it off and starts."""
    logger.warning(
        "%s.enable_switch=true is ignored with actor_rollout_ref.hybrid_engine=false: no rollout replica is "
        "on the training devices to switch, and veRL turns the switch off (trainer_separate_async.py:89-94).",
        SWITCH,
    )


def _sync_step_unfit(config: DictConfig) -> list[Unfit]:
    """M = k x ppo_mini_batch_size (``trainer_separate_async.py:56-63``): each of the k local updates
    between two weight syncs trains one mini-batch of M / k prompts."""
    m = int(config.data.train_batch_size)
    step_key = "trainer.v1.separate_async.parameter_sync_step"
    mini_key = "actor_rollout_ref.actor.ppo_mini_batch_size"
    raw_mini = config.actor_rollout_ref.actor.ppo_mini_batch_size
    raw_k = config.trainer.v1.separate_async.parameter_sync_step
    if raw_mini is None or raw_k is None:  # veRL multiplies them (a TypeError inside Ray)
        nulls = [key for key, value in ((step_key, raw_k), (mini_key, raw_mini)) if value is None]
        return [
            Unfit(
                f"{' and '.join(nulls)} null: data.train_batch_size={m} must equal {step_key} x {mini_key} "
                "(trainer_separate_async.py:56-63)",
                (f"{step_key}=1", f"{mini_key}={m}"),
            )
        ]
    mini, k = int(raw_mini), int(raw_k)
    if m == k * mini:
        return []
    fits = [f"{step_key}={m // mini}"] if mini > 0 and m % mini == 0 else []
    fits += [f"{mini_key}={m // k}"] if k > 0 and m % k == 0 else []
    reason = (
        f"data.train_batch_size={m} must equal {step_key}={k} x {mini_key}={mini} "
        "(trainer_separate_async.py:56-63: each local update between two weight syncs trains one mini-batch)"
    )
    if len(fits) == 2:
        reason += f"; {fits[1]} fits as well"
    return [Unfit(reason, (fits[0],) if fits else (f"{step_key}=1", f"{mini_key}={m}"))]


def _pool_unfit(config: DictConfig, on_cpu: bool) -> list[Unfit]:
    """A standalone rollout pool, ``rollout.nnodes x rollout.n_gpus_per_node`` devices besides the
    trainer's (``trainer_separate_async.py:64-67``), of at least one rollout engine: veRL starts
    pool // engine engines (`rollout_engine`: ``llm_server.py:434-460``, disaggregated prefill and
    decode counted), none in a smaller pool. On the CPU backend one ``hf`` server a slot."""
    rollout = config.actor_rollout_ref.rollout
    nodes, per_node = int(rollout.nnodes or 0), int(rollout.n_gpus_per_node or 0)  # null: none
    need, how = rollout_engine(config)
    if on_cpu or not verl_code_is_known("standalone_pool"):
        need = 1
    if nodes > 0 and per_node > 0 and nodes * per_node >= need:
        return []
    fix_nodes = max(nodes, 1)
    fix_per_node = max(per_node, -(-need // fix_nodes))
    fix = tuple(
        f"actor_rollout_ref.rollout.{key}={new}"
        for key, old, new in (("nnodes", nodes, fix_nodes), ("n_gpus_per_node", per_node, fix_per_node))
        if new != old
    )
    reason = (
        f"actor_rollout_ref.rollout.nnodes={shown(rollout.nnodes)} x "
        f"n_gpus_per_node={shown(rollout.n_gpus_per_node)}: separate_async generates on a standalone "
        "rollout pool of that many devices besides the trainer's trainer.nnodes x "
        "trainer.n_gpus_per_node (trainer_separate_async.py:64-67)"
    )
    if need > 1:
        reason += f", of at least one rollout engine of {need} ({how}; llm_server.py:434-460)"
    return [Unfit(reason, fix)]


def _switch_unfit(config: DictConfig) -> list[Unfit]:
    """veRL's ``HybridRolloutSwitchConfig`` refuses a threshold ratio outside (0, 1] and a cost
    window below 1 (``config.py:85-89``), built in ``PPOTrainerSeparateAsync.__init__`` (``:86-88``)."""
    unfit = []
    ratio = float(OmegaConf.select(config, f"{SWITCH}.switch_threshold_ratio", default=0.4))
    if not 0.0 < ratio <= 1.0:
        unfit.append(
            Unfit(
                f"{SWITCH}.switch_threshold_ratio={ratio} is outside (0, 1] (config.py:86-87)",
                (f"{SWITCH}.switch_threshold_ratio=0.4",),
            )
        )
    window = int(OmegaConf.select(config, f"{SWITCH}.switch_cost_window_size", default=3))
    if window <= 0:
        unfit.append(
            Unfit(
                f"{SWITCH}.switch_cost_window_size={window} must be positive (config.py:88-89)",
                (f"{SWITCH}.switch_cost_window_size=3",),
            )
        )
    return unfit
