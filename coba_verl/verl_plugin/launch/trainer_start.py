"""The start-up conditions of veRL 0.9.1 that every trainer meets once Ray runs, checked before Ray.

`trainer_start_unfit` lists, for `coba_verl.verl_plugin.launch.verl_start.check_verl_start`, what
each of veRL's trainers (the three V1 modes and, where it says so, the classic ``RayPPOTrainer``)
would stop on inside Ray: the reward model's own pool; a checkpoint engine that veRL does not
register, or that does not load here (`coba_verl.verl_plugin.launch.checkpoint_engines`);
disaggregated prefill and decode with a rollout that cannot split; training devices that the
rollout worker cannot split into rollout engines, or that hold no rollout server; in V1 the replay
buffer's settings (DAPO's metric and reward, the off-policy bound). `Unfit`, what each check
returns, is here. Each rule is checked while its veRL code is 0.9.1's (`verl_code_is_known`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf

from coba_verl.cpu import CHECKPOINT_ENGINE_BACKEND
from coba_verl.cpu.launcher import cpu_backend_enabled
from coba_verl.verl_plugin.launch.checkpoint_engines import (
    engine_names,
    install_hint,
    loading_engines,
    missing_for,
    weight_sync_engine,
)
from coba_verl.verl_plugin.launch.verl_code import verl_code_is_known
from coba_verl.verl_plugin.verl_names import verl_mode

REWARD = "reward.reward_model"
SAMPLER = "trainer.v1.sampler"
ROLLOUT = "actor_rollout_ref.rollout"
#: veRL's replay buffer's ``max_off_policy_strategy`` values (``replay_buffer.py:175-177``).
OFF_POLICY_STRATEGIES = ("drop", "wait")
#: The rollouts veRL's ``RolloutConfig`` lets disaggregate prefill and decode (``rollout.py:341-344``).
DISAGGREGATED_ROLLOUTS = ("sglang", "vllm")
#: Where veRL looks a checkpoint engine up by name.
REGISTRY = "checkpoint_engine/base.py:93-98"


class Unfit(NamedTuple):
    """A setting a trainer of veRL stops on at start: why, and the overrides that fit (none where only
    an install does: the reason names it)."""

    reason: str
    fix: tuple[str, ...]


def trainer_start_unfit(config: DictConfig) -> list[Unfit]:
    """What veRL's trainer for ``config`` would stop on once Ray runs, each with overrides that fit."""
    v1 = bool(config.trainer.use_v1)
    unfit = reward_pool_unfit(config, v1) + checkpoint_engine_unfit(config) + disaggregation_unfit(config)
    unfit += training_devices_unfit(config, v1)
    if v1:
        unfit += replay_buffer_unfit(config)
    return unfit


def shown(value: Any) -> str:
    """A config value as an override writes it (``null``, ``true``, ``''``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if value != "" else "''"


def own_pool_fix(config: DictConfig) -> tuple[str, ...]:
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
    fix = own_pool_fix(config)
    if not fix or not verl_code_is_known(rule):
        return []
    nodes = OmegaConf.select(config, f"{REWARD}.nnodes")
    per_node = OmegaConf.select(config, f"{REWARD}.n_gpus_per_node")
    return [
        Unfit(
            f"{REWARD}.enable_resource_pool=true puts the reward model in its own pool of "
            f"{REWARD}.nnodes={shown(nodes)} x n_gpus_per_node={shown(per_node)} devices, both of which "
            f"must be above 0 (veRL's default nnodes is 0; {where})",
            fix,
        )
    ]


def standalone_engine_fit() -> tuple[str, tuple[str, ...], str]:
    """The checkpoint engine to send weights to ``separate_async``'s standalone pool with here, its
    override and words on it: an engine other than ``naive`` that loads here; where none does, the
    one missing the fewest packages, no override, and words naming what to install for it."""
    engine = weight_sync_engine()
    if engine is None:
        return "", (), "none but naive is registered"
    name, missing = engine
    if missing is None:
        loading = [n for n in loading_engines() if n != "naive"]
        verb = "loads" if len(loading) == 1 else "load"
        return name, (f"{ROLLOUT}.checkpoint_engine.backend={name}",), f"{', '.join(loading)} {verb} here"
    words = (
        f"none but naive loads here: {name} needs {missing}, which is not installed ({install_hint(missing)})"
    )
    return name, (), words


def checkpoint_engine_unfit(config: DictConfig) -> list[Unfit]:
    """``rollout.checkpoint_engine.backend`` must name an engine in veRL's registry
    (``checkpoint_engine/base.py:93-98``), which every trainer's actor workers and checkpoint manager
    ask for it: one that veRL's ``checkpoint_engine`` modules register and that loads here (its
    module imports: `checkpoint_engines.missing_for`), or on the CPU backend its own. Left to veRL
    while ``custom_backend_module`` may register others."""
    engine = OmegaConf.select(config, f"{ROLLOUT}.checkpoint_engine")
    if engine is None or engine.get("custom_backend_module") or not verl_code_is_known("checkpoint_engine"):
        return []
    backend = engine.get("backend")
    on_cpu = cpu_backend_enabled(config)
    names = engine_names() + ((CHECKPOINT_ENGINE_BACKEND,) if on_cpu else ())
    key = f"{ROLLOUT}.checkpoint_engine.backend"
    if backend not in names:
        reason = f"{key}={shown(backend)} is no checkpoint engine veRL registers ({', '.join(names)}; "
        reason += f"{REGISTRY})"
    elif backend == CHECKPOINT_ENGINE_BACKEND or (missing := missing_for(backend)) is None:
        return []
    else:
        reason = (
            f"{key}={backend} does not load here: veRL registers it where verl/{missing.module.path} "
            f"imports, which needs {missing}, not installed here ({install_hint(missing)}; "
            "checkpoint_engine/__init__.py)"
        )
    mode = verl_mode(str(OmegaConf.select(config, "trainer.v1.trainer_mode", default="")))
    if bool(config.trainer.use_v1) and mode == "separate_async" and not on_cpu:
        name, fix, words = standalone_engine_fit()  # separate_async's own rule refuses naive on GPUs
        if not fix and name != backend:
            reason += f"; of veRL's engines, {words}"
        return [Unfit(reason, fix)]
    return [Unfit(reason, (f"{key}=naive",))]


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
                    (f"{REWARD}.enable_resource_pool=true", *own_pool_fix(config)),
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
    """Devices of one rollout engine and how veRL counts them, by the settings' names
    (``llm_server.py:434-454``): tensor x data x pipeline parallel size; with disaggregated prefill
    and decode, (tensor parallel x prefill_replicas + decode tensor parallel x decode_replicas) x
    data x pipeline parallel size."""
    rollout = OmegaConf.select(config, ROLLOUT, default=None) or DictConfig({})

    def size(key: str) -> int:
        return int(OmegaConf.select(rollout, key, default=1) or 1)

    tp, dp = size("tensor_model_parallel_size"), size("data_parallel_size")
    pp = size("pipeline_model_parallel_size")
    if disaggregated is None:
        disaggregated = bool(OmegaConf.select(rollout, "disaggregation.enabled", default=False))
    data_pipeline = f"data_parallel_size={dp} x pipeline_model_parallel_size={pp}"
    if not disaggregated:
        return tp * dp * pp, f"{ROLLOUT}.tensor_model_parallel_size={tp} x {data_pipeline}"
    prefill, decode = size("disaggregation.prefill_replicas"), size("disaggregation.decode_replicas")
    decode_tp = int(OmegaConf.select(rollout, "disaggregation.decode_tensor_model_parallel_size") or tp)
    return (tp * prefill + decode_tp * decode) * dp * pp, (
        f"disaggregated: ({ROLLOUT}.tensor_model_parallel_size={tp} x disaggregation.prefill_replicas="
        f"{prefill} + decode_tensor_model_parallel_size={decode_tp} x decode_replicas={decode}) x "
        f"{data_pipeline}"
    )


def _devices_fit(nodes: int, per_node: int, engine: int) -> int:
    """The ``trainer.n_gpus_per_node`` nearest ``per_node`` whose devices divide into engines of
    ``engine``: the largest below it, or else the smallest above."""
    fits = [p for p in range(per_node, 0, -1) if nodes * p % engine == 0]
    fits += [p for p in range(per_node + 1, per_node + engine + 1) if nodes * p % engine == 0]
    return fits[0]


def training_devices_unfit(config: DictConfig, v1: bool) -> list[Unfit]:
    """The rollout engines on the training devices, ``trainer.nnodes x n_gpus_per_node``, which the
    actor worker holds in every trainer (``trainer_base.py:801-806``, classic
    ``main_ppo_v0.py:35-54``) but ``separate_async`` with ``actor_rollout_ref.hybrid_engine=false``
    (there its role is ``actor`` and no rollout is on them):

    - veRL's rollout worker lays its devices out as a mesh of engines of tensor x data x pipeline
      parallel size and asserts that they divide (``engine_workers.py:655-661``, in ``init_model``);
    - V1: veRL starts devices // engine rollout servers, disaggregated prefill and decode counted
      (``llm_server.py:434-460``), and asserts nothing, so a pool smaller than one engine starts none.
    """
    mode = verl_mode(str(OmegaConf.select(config, "trainer.v1.trainer_mode", default="")))
    hybrid = bool(OmegaConf.select(config, "actor_rollout_ref.hybrid_engine", default=True))
    if v1 and mode == "separate_async" and not hybrid:
        return []
    nodes = int(OmegaConf.select(config, "trainer.nnodes", default=0) or 0)
    per_node = int(OmegaConf.select(config, "trainer.n_gpus_per_node", default=0) or 0)
    if nodes <= 0:  # no trainer pool: veRL's validate_config refuses it
        return []
    devices = nodes * per_node
    mesh, mesh_how = rollout_engine(config, disaggregated=False)
    roles = "rollout_role" if v1 else "rollout_role_classic"
    if devices % mesh and verl_code_is_known("rollout_mesh") and verl_code_is_known(roles):
        return [
            Unfit(
                f"trainer.nnodes={nodes} x trainer.n_gpus_per_node={per_node} = {devices} training devices "
                f"are not divisible by the rollout engine's {mesh} ({mesh_how}), which veRL's rollout worker "
                "asserts as it lays them out (engine_workers.py:655-661)",
                (f"trainer.n_gpus_per_node={_devices_fit(nodes, per_node, mesh)}",),
            )
        ]
    need, how = rollout_engine(config)
    if not v1 or devices >= need or not verl_code_is_known("hybrid_pool"):
        return []
    fix = (
        (f"{ROLLOUT}.disaggregation.enabled=false",)
        if need > mesh and devices >= mesh
        else (f"trainer.n_gpus_per_node={-(-need // nodes)}",)
    )
    return [
        Unfit(
            f"trainer.nnodes={nodes} x trainer.n_gpus_per_node={per_node} devices hold no rollout engine of "
            f"{need} ({how}), so veRL would start no rollout server on them (llm_server.py:434-460)",
            fix,
        )
    ]
