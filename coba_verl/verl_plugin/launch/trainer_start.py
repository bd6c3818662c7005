"""veRL 0.9.1's start-up conditions that every trainer meets once Ray runs, checked before Ray.

`trainer_start_unfit` lists what veRL's trainers (the three V1 modes, and where it says so the
classic ``RayPPOTrainer``) would stop on inside Ray, for
`coba_verl.verl_plugin.launch.verl_start.check_verl_start`: the reward model's own pool, the
checkpoint engine's name, disaggregated prefill and decode, and in V1 the replay buffer's settings
(DAPO's metric and reward, the off-policy bound) and the rollout engines on the training devices.
Each rule is checked while its veRL code is 0.9.1's (`verl_code_is_known`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from coba_verl.cpu import CHECKPOINT_ENGINE_BACKEND
from coba_verl.cpu.launcher import cpu_backend_enabled
from coba_verl.verl_plugin.launch.verl_code import Unfit, verl_code_is_known, verl_registrations
from coba_verl.verl_plugin.verl_names import verl_mode

REWARD = "reward.reward_model"
SAMPLER = "trainer.v1.sampler"
ROLLOUT = "actor_rollout_ref.rollout"
#: veRL's replay buffer's ``max_off_policy_strategy`` values (``replay_buffer.py:175-177``).
OFF_POLICY_STRATEGIES = ("drop", "wait")
#: The rollouts veRL's ``RolloutConfig`` lets disaggregate prefill and decode (``rollout.py:341-344``).
DISAGGREGATED_ROLLOUTS = ("sglang", "vllm")


def trainer_start_unfit(config: DictConfig) -> list[Unfit]:
    """What veRL's trainer for ``config`` would stop on once Ray runs, each with overrides that fit."""
    v1 = bool(config.trainer.use_v1)
    unfit = reward_pool_unfit(config, v1) + checkpoint_engine_unfit(config) + disaggregation_unfit(config)
    if v1:
        unfit += replay_buffer_unfit(config) + hybrid_pool_unfit(config)
    return unfit


def shown(value: Any) -> str:
    """A config value as an override writes it (``null``, ``true``, ``''``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if value != "" else "''"


def _own_pool_fix(config: DictConfig) -> tuple[str, ...]:
    """The reward model's own pool: the sizes of it that are 0 or below, set to 1."""
    return tuple(
        f"{REWARD}.{key}=1"
        for key in ("nnodes", "n_gpus_per_node")
        if int(OmegaConf.select(config, f"{REWARD}.{key}", default=0) or 0) <= 0
    )


def reward_pool_unfit(config: DictConfig, v1: bool) -> list[Unfit]:
    """``reward.reward_model.enable_resource_pool=true`` builds a pool of ``nnodes x n_gpus_per_node``
    devices, both above 0 (veRL's default nnodes is 0), in every trainer's resource-pool setup:
    ``trainer_base.py:823-827`` (V1, in ``init``) and ``main_ppo_v0.py:75-79`` (classic)."""
    rule, where = "reward_pool", "trainer_base.py:823-827"
    if not v1:
        rule, where = "reward_pool_classic", "main_ppo_v0.py:75-79"
    if not OmegaConf.select(config, f"{REWARD}.enable_resource_pool", default=False):
        return []
    fix = _own_pool_fix(config)
    if not fix or not verl_code_is_known(rule):
        return []
    nodes = OmegaConf.select(config, f"{REWARD}.nnodes")
    per_node = OmegaConf.select(config, f"{REWARD}.n_gpus_per_node")
    return [
        Unfit(
            f"{REWARD}.enable_resource_pool=true puts the reward model in its own pool of "
            f"{REWARD}.nnodes={nodes} x n_gpus_per_node={per_node} devices, both of which must be above 0 "
            f"(veRL's default nnodes is 0; {where})",
            fix,
        )
    ]


def checkpoint_engine_unfit(config: DictConfig) -> list[Unfit]:
    """``rollout.checkpoint_engine.backend`` must name an engine of veRL's registry
    (``checkpoint_engine/base.py:93-98``), which every trainer's actor workers and checkpoint manager
    ask for it; the names are those veRL's ``checkpoint_engine`` modules register (`verl_registrations`),
    and on the CPU backend its own. Left to veRL while ``custom_backend_module`` may register others."""
    engine = OmegaConf.select(config, f"{ROLLOUT}.checkpoint_engine")
    if engine is None or engine.get("custom_backend_module") or not verl_code_is_known("checkpoint_engine"):
        return []
    backend = engine.get("backend")
    names = verl_registrations("checkpoint_engine", "CheckpointEngineRegistry")
    names += (CHECKPOINT_ENGINE_BACKEND,) if cpu_backend_enabled(config) else ()
    if backend in names:
        return []
    mode = verl_mode(str(OmegaConf.select(config, "trainer.v1.trainer_mode", default="")))
    separate = bool(config.trainer.use_v1) and mode == "separate_async"
    # separate_async's own rule refuses naive on GPUs
    fit = "nccl" if separate and not cpu_backend_enabled(config) else "naive"
    return [
        Unfit(
            f"{ROLLOUT}.checkpoint_engine.backend={shown(backend)} is no checkpoint engine veRL registers "
            f"({', '.join(names)}; checkpoint_engine/base.py:93-98)",
            (f"{ROLLOUT}.checkpoint_engine.backend={fit}",),
        )
    ]


def disaggregation_unfit(config: DictConfig) -> list[Unfit]:
    """Disaggregated prefill and decode needs SGLang or vLLM: veRL's ``RolloutConfig`` refuses the
    others (``workers/config/rollout.py:341-344``), built in every trainer's rollout workers."""
    if not OmegaConf.select(config, f"{ROLLOUT}.disaggregation.enabled", default=False):
        return []
    rollout = config.actor_rollout_ref.rollout
    if "name" not in rollout or not verl_code_is_known("disaggregated_rollout"):
        return []  # no rollout named (``???``): Hydra's own error
    name = rollout.name
    if name in DISAGGREGATED_ROLLOUTS:
        return []
    return [
        Unfit(
            f"{ROLLOUT}.disaggregation.enabled=true needs {ROLLOUT}.name in "
            f"{', '.join(DISAGGREGATED_ROLLOUTS)}, not {shown(name)} (workers/config/rollout.py:341-344)",
            (f"{ROLLOUT}.disaggregation.enabled=false",),
        )
    ]


def replay_buffer_unfit(config: DictConfig) -> list[Unfit]:
    """V1's replay buffer, built in every V1 trainer's constructor (``trainer_base.py:139-185``):
    DAPO's metric set and its reward known at sampling time (``_resolve_filter_groups_metric``,
    ``:194-204``), the off-policy bound's settings (``replay_buffer.py:165-177``). A custom sampler
    (``trainer.v1.sampler.custom_sampler``) has rules of its own: left to it."""
    sampler = OmegaConf.select(config, SAMPLER, default=None) or DictConfig({})
    custom = sampler.get("custom_sampler")
    if (custom is not None and custom.get("path") and custom.get("name")) or not verl_code_is_known(
        "replay_buffer"
    ):
        return []
    unfit = []
    dapo = bool(OmegaConf.select(config, "algorithm.filter_groups.enable", default=False))
    if dapo and verl_code_is_known("filter_groups"):
        metric = OmegaConf.select(config, "algorithm.filter_groups.metric")
        if not metric:
            unfit.append(
                Unfit(
                    f"algorithm.filter_groups.metric={shown(metric)}: DAPO dynamic sampling "
                    "(algorithm.filter_groups.enable=true) keeps the groups whose metric varies, so veRL "
                    "needs one: reward (the pre-KL reward) or a reward_extra_info field such as acc "
                    "(trainer_base.py:194-196)",
                    ("algorithm.filter_groups.metric=reward",),
                )
            )
        enable = OmegaConf.select(config, f"{REWARD}.enable", default=False)
        if enable and not OmegaConf.select(config, f"{REWARD}.enable_resource_pool", default=False):
            unfit.append(
                Unfit(
                    f"{REWARD}.enable=true with {REWARD}.enable_resource_pool=false: DAPO dynamic sampling "
                    "needs the reward at sampling time, and a colocated reward model computes it only after "
                    "(trainer_base.py:198-204)",
                    (f"{REWARD}.enable_resource_pool=true", *_own_pool_fix(config)),
                )
            )
    if "max_off_policy_strategy" in sampler and verl_code_is_known("off_policy"):
        threshold = sampler.get("max_off_policy_threshold")
        if threshold is not None and not (isinstance(threshold, int) and threshold > 0):
            unfit.append(
                Unfit(
                    f"{SAMPLER}.max_off_policy_threshold={shown(threshold)} is neither a positive integer "
                    "nor null (replay_buffer.py:165-169)",
                    (f"{SAMPLER}.max_off_policy_threshold=8",),
                )
            )
        strategy = sampler.get("max_off_policy_strategy")
        if strategy not in OFF_POLICY_STRATEGIES:
            unfit.append(
                Unfit(
                    f"{SAMPLER}.max_off_policy_strategy={shown(strategy)} is not one of "
                    f"{', '.join(OFF_POLICY_STRATEGIES)} (replay_buffer.py:175-177)",
                    (f"{SAMPLER}.max_off_policy_strategy=drop",),
                )
            )
    return unfit


def rollout_engine(config: DictConfig, disaggregated: bool | None = None) -> tuple[int, str]:
    """Devices of one rollout engine and how veRL counts them (``llm_server.py:434-454``): tensor x
    data x pipeline parallel size; with disaggregated prefill and decode, (tensor parallel x
    prefill_replicas + decode tensor parallel x decode_replicas) x data x pipeline parallel size."""
    rollout = OmegaConf.select(config, ROLLOUT, default=None) or DictConfig({})

    def size(key: str) -> int:
        return int(OmegaConf.select(rollout, key, default=1) or 1)

    tp, dp = size("tensor_model_parallel_size"), size("data_parallel_size")
    pp = size("pipeline_model_parallel_size")
    if disaggregated is None:
        disaggregated = bool(OmegaConf.select(rollout, "disaggregation.enabled", default=False))
    if not disaggregated:
        return tp * dp * pp, f"tensor x data x pipeline parallel size {tp} x {dp} x {pp}"
    prefill, decode = size("disaggregation.prefill_replicas"), size("disaggregation.decode_replicas")
    decode_tp = int(OmegaConf.select(rollout, "disaggregation.decode_tensor_model_parallel_size") or tp)
    return (tp * prefill + decode_tp * decode) * dp * pp, (
        f"disaggregated: (tensor parallel {tp} x prefill_replicas {prefill} + decode tensor parallel "
        f"{decode_tp} x decode_replicas {decode}) x data {dp} x pipeline {pp}"
    )


def hybrid_pool_unfit(config: DictConfig) -> list[Unfit]:
    """The rollout engines on the training devices: veRL starts ``trainer.nnodes x n_gpus_per_node //
    engine`` of them (``llm_server.py:434-460``) and asserts nothing, so a pool smaller than one
    engine starts none. Not in ``separate_async`` with ``actor_rollout_ref.hybrid_engine=false``,
    which starts none there (``trainer_base.py:371-378``)."""
    mode = verl_mode(str(OmegaConf.select(config, "trainer.v1.trainer_mode", default="")))
    hybrid = bool(OmegaConf.select(config, "actor_rollout_ref.hybrid_engine", default=True))
    if (mode == "separate_async" and not hybrid) or not verl_code_is_known("hybrid_pool"):
        return []
    need, how = rollout_engine(config)
    nodes = int(OmegaConf.select(config, "trainer.nnodes", default=0) or 0)
    per_node = int(OmegaConf.select(config, "trainer.n_gpus_per_node", default=0) or 0)
    if nodes * per_node >= need or nodes <= 0:  # no trainer pool: veRL's validate_config refuses it
        return []
    plain, _ = rollout_engine(config, disaggregated=False)
    fix = (
        (f"{ROLLOUT}.disaggregation.enabled=false",)
        if need > plain and nodes * per_node >= plain
        else (f"trainer.n_gpus_per_node={-(-need // nodes)}",)
    )
    return [
        Unfit(
            f"trainer.nnodes={nodes} x trainer.n_gpus_per_node={per_node} devices hold no rollout engine of "
            f"{need} ({how}), so veRL would start no rollout server on them (llm_server.py:434-460)",
            fix,
        )
    ]
