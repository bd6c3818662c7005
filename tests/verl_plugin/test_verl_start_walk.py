"""Every recipe in every V1 mode, with each start-up setting veRL checks inside Ray set to a bad value
and to one that fits: the config either gets through veRL's own start-up code that runs without Ray
or is refused before Ray in one line naming the setting, and a refused one is one veRL's own code
stops on.

veRL's start-up code here (`verl_starts`): the constructor of its trainer class for the mode (where
the replay buffer, the ``separate_async`` assertions and the hybrid switch's config are built), the
resource-pool setup of ``init`` (``_init_resource_pool_mgr``), its ``RolloutConfig``, its
checkpoint-engine registry as veRL's own imports fill it here (`verl_registry_get`), the first step's
local-update split, the rollout worker laying out the training devices (`rollout_worker_lays_out`),
its request router over the rollout servers ``LLMServerManager`` starts on them and on
``separate_async``'s standalone pool (`route_a_request`), and the old policy's snapshot of
``separate_async``'s actor. The walk runs where veRL's nccl engine loads (cupy installed, a stand-in);
the engines whose modules do not import here are walked through the packages veRL's imports need
(`test_each_engine_whose_module_does_not_import_here_loads_where_the_packages_named_are_installed`).
A setting that meets another veRL check makes this walk fail, and so is found here.
"""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from coba_verl.refusal import CobaRefusal
from tests.recipes import test_recipes as recipes
from tests.verl_plugin.verl_start_code import (
    installed,
    rollout_worker_lays_out,
    route_a_request,
    verl_registry_get,
)

pytestmark = pytest.mark.slow

MODES = ("sync", "colocate_async", "separate_async")
ASYNC = frozenset({"colocate_async", "separate_async"})
REWARD = "reward.reward_model"
DAPO = "algorithm.filter_groups"
SAMPLER = "trainer.v1.sampler"
ROLLOUT = "actor_rollout_ref.rollout"
DISAGGREGATION = f"{ROLLOUT}.disaggregation"
BACKEND = f"{ROLLOUT}.checkpoint_engine.backend"
SWITCH = "trainer.v1.separate_async.hybrid_rollout"
HYBRID = "actor_rollout_ref.hybrid_engine"
TP = f"{ROLLOUT}.tensor_model_parallel_size"
SYNC_STEP = "trainer.v1.{mode}.parameter_sync_step"  # each mode's own key
STRATEGY = "actor_rollout_ref.actor.strategy"
#: Keys whose change the rollout worker's layout and its servers read (`verl_starts`' ``rollout_changed``).
DEVICES = ("trainer.nnodes", "trainer.n_gpus_per_node", HYBRID)

#: (name, overrides, the modes it is walked in): each start-up setting at a bad value and at one that
#: fits (the recipe's own value, veRL's default, is the ``default`` row).
VARIANTS: list[tuple[str, dict, frozenset[str]]] = [
    (name, overrides, frozenset(modes))
    for name, overrides, modes in [
        ("default", {}, MODES),
        ("reward_pool_nnodes_0", {f"{REWARD}.enable_resource_pool": True}, MODES),
        ("reward_pool_gpus_0", {f"{REWARD}.enable_resource_pool": True, f"{REWARD}.nnodes": 1,
                                f"{REWARD}.n_gpus_per_node": 0}, MODES),
        ("reward_pool_fits", {f"{REWARD}.enable_resource_pool": True, f"{REWARD}.nnodes": 1}, MODES),
        ("dapo_metric_null", {f"{DAPO}.enable": True, f"{DAPO}.metric": None}, MODES),
        ("dapo_metric_reward", {f"{DAPO}.enable": True, f"{DAPO}.metric": "reward"}, MODES),
        ("dapo_colocated_rm", {f"{DAPO}.enable": True, f"{DAPO}.metric": "reward", f"{REWARD}.enable": True},
         MODES),
        ("dapo_rm_own_pool", {f"{DAPO}.enable": True, f"{DAPO}.metric": "reward", f"{REWARD}.enable": True,
                              f"{REWARD}.enable_resource_pool": True, f"{REWARD}.nnodes": 1}, MODES),
        ("off_policy_strategy_keep", {f"{SAMPLER}.max_off_policy_strategy": "keep"}, MODES),
        ("off_policy_strategy_wait", {f"{SAMPLER}.max_off_policy_strategy": "wait"}, MODES),
        ("off_policy_threshold_0", {f"{SAMPLER}.max_off_policy_threshold": 0}, MODES),
        ("off_policy_threshold_null", {f"{SAMPLER}.max_off_policy_threshold": None}, MODES),
        ("checkpoint_engine_unknown", {BACKEND: "gloo"}, MODES),
        *[(f"checkpoint_engine_{name}", {BACKEND: name}, MODES)
          for name in ("naive", "nccl", "delta_sharded", "nixl", "mooncake", "kimi_ckpt_engine")],
        ("disaggregated", {f"{DISAGGREGATION}.enabled": True}, MODES),
        ("disaggregated_8_prefill", {f"{DISAGGREGATION}.enabled": True,
                                     f"{DISAGGREGATION}.prefill_replicas": 8}, MODES),
        ("hybrid_switch", {f"{SWITCH}.enable_switch": True}, MODES),
        ("hybrid_switch_ratio_1.5", {f"{SWITCH}.switch_threshold_ratio": 1.5}, MODES),
        ("hybrid_switch_disaggregated", {f"{SWITCH}.enable_switch": True, f"{DISAGGREGATION}.enabled": True},
         MODES),
        ("hybrid_switch_disaggregated_no_hybrid_engine", {f"{SWITCH}.enable_switch": True,
         f"{DISAGGREGATION}.enabled": True, HYBRID: False, f"{ROLLOUT}.n_gpus_per_node": 8}, MODES),
        ("hybrid_engine_false", {HYBRID: False}, MODES),
        ("parameter_sync_step_3", {SYNC_STEP: 3}, ASYNC),  # sync's is coba-verl's own rule (1)
        ("parameter_sync_step_4", {SYNC_STEP: 4}, ASYNC),
        ("actor_strategy_torchtitan", {STRATEGY: "torchtitan"}, MODES),
        ("actor_strategy_fsdp2", {STRATEGY: "fsdp2"}, MODES),
        ("rollout_tp_3", {TP: 3}, MODES),  # 3 divides neither 8 nor 1 training devices
        ("rollout_tp_3_no_hybrid_engine", {TP: 3, HYBRID: False}, MODES),
        ("training_devices_6", {"trainer.n_gpus_per_node": 6}, MODES),
    ]
]  # fmt: skip
#: Rows not walked on the CPU backend: its own rules, not veRL's, stop them (its launcher takes the
#: ``ray_object_store`` engine alone for ``separate_async``, its ``hf`` server tensor parallel 1).
GPU_ONLY = {
    f"checkpoint_engine_{name}" for name in ("nccl", "delta_sharded", "nixl", "mooncake", "kimi_ckpt_engine")
}
GPU_ONLY |= {"rollout_tp_3_no_hybrid_engine"}

ALL = frozenset(MODES)
SEPARATE = frozenset({"separate_async"})
#: On every GPU recipe: the modes where a row is refused, and those where it passes (a row whose
#: outcome depends on the recipe's sizes is walked, and pinned by neither).
REFUSED_IN: dict[str, frozenset[str]] = {
    **dict.fromkeys(["reward_pool_nnodes_0", "reward_pool_gpus_0", "dapo_metric_null", "dapo_colocated_rm",
                     "off_policy_strategy_keep", "off_policy_threshold_0", "checkpoint_engine_unknown",
                     "checkpoint_engine_nixl", "checkpoint_engine_mooncake",
                     "checkpoint_engine_kimi_ckpt_engine", "rollout_tp_3"], ALL),
    **dict.fromkeys(["checkpoint_engine_naive", "hybrid_switch_ratio_1.5", "hybrid_switch_disaggregated",
                     "parameter_sync_step_4", "actor_strategy_torchtitan"], SEPARATE),
    "parameter_sync_step_3": ASYNC,
}  # fmt: skip
PASSED_IN: dict[str, frozenset[str]] = {
    **dict.fromkeys(["default", "reward_pool_fits", "dapo_metric_reward", "dapo_rm_own_pool",
                     "off_policy_strategy_wait", "off_policy_threshold_null", "checkpoint_engine_nccl",
                     "checkpoint_engine_delta_sharded", "hybrid_switch", "hybrid_engine_false",
                     "actor_strategy_fsdp2"], ALL),
    **dict.fromkeys(["checkpoint_engine_naive", "hybrid_switch_ratio_1.5", "actor_strategy_torchtitan"],
                    ALL - SEPARATE),
    "hybrid_switch_disaggregated_no_hybrid_engine": SEPARATE,
    "parameter_sync_step_4": frozenset({"colocate_async"}),
}  # fmt: skip


def _with(config: DictConfig, overrides: dict, mode: str = "") -> DictConfig:
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        OmegaConf.update(config, key.format(mode=mode), value, force_add=True)
    return config


@pytest.fixture(scope="module")
def recipe_configs() -> dict[tuple[str, str, str], DictConfig]:
    """Each recipe in each V1 mode as it launches: composed once per recipe; ``separate_async`` with
    the overrides its refusal names where cupy is installed (the recipes are written for the other
    modes; without cupy no engine but naive loads and the refusal names an install)."""
    configs = {}
    with installed("cupy"):
        _launchable(configs)
    return configs


def _launchable(configs: dict[tuple[str, str, str], DictConfig]) -> None:
    for task, setting in recipes.ALL_SETTINGS:
        composed = recipes.compose_run(task, {"SETTING": setting})
        for mode in MODES:
            config = _with(composed, {"trainer.v1.trainer_mode": mode})
            try:
                recipes.launch_checks(config)
            except CobaRefusal as refusal:
                assert mode == "separate_async", refusal
                fix = str(refusal).split("To launch it, set: ")[1].rstrip(".").split()
                config = _with(config, {k: yaml.safe_load(v) for k, v in (f.split("=", 1) for f in fix)})
            configs[task, setting, mode] = config


class _Stepping(Exception):
    """veRL's first step got past its check of the local updates."""


def _first_step_splits_the_batch(trainer: object) -> None:
    """veRL's ``PPOTrainer.step`` up to ``prepare_step``: its assertion that the local updates
    (``parameter_sync_step``) divide ``data.train_batch_size`` (``trainer_base.py:533-538``)."""

    def prepare_step() -> None:
        raise _Stepping

    trainer.prepare_step = prepare_step
    with pytest.raises(_Stepping):
        trainer.step({}, {})


def verl_starts(config: DictConfig, mode: str, rollout_changed: bool = True) -> None:
    """veRL's start-up code for ``mode`` that runs without Ray, on ``config`` itself (which it changes);
    raises where veRL would stop. veRL's ``RolloutConfig``, its rollout worker's layout and its
    request router only where ``rollout_changed`` (each builds a ``RolloutConfig``, which costs as
    much as the rest together)."""
    from verl.experimental.separation.engine_workers import DetachActorWorker
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.utils.config import omega_conf_to_dataclass

    import coba_verl.cpu.checkpoint_engine  # noqa: F401  (the CPU backend's engine, as its processes have it)

    OmegaConf.update(config, "trainer.v1.trainer_mode", mode)
    on_cpu = bool(OmegaConf.select(config, "coba_cpu.enable"))
    if on_cpu and mode == "separate_async" and OmegaConf.select(config, BACKEND) == "naive":
        OmegaConf.update(config, BACKEND, "ray_object_store")  # the CPU launcher's swap
    classes = {"sync": PPOTrainerSync, "colocate_async": PPOTrainerColocateAsync,
               "separate_async": PPOTrainerSeparateAsync}  # fmt: skip
    trainer = classes[mode](config)
    trainer._init_resource_pool_mgr()
    verl_registry_get(OmegaConf.select(config, BACKEND))
    if type(trainer).step is PPOTrainer.step:
        _first_step_splits_the_batch(trainer)
    if mode == "separate_async" and not OmegaConf.select(config, "algorithm.rollout_correction.bypass_mode"):
        DetachActorWorker._get_strategy_handlers(
            SimpleNamespace(config=config.actor_rollout_ref, _strategy_handlers=None)
        )
    if not rollout_changed:
        return
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    if mode != "separate_async" or config.actor_rollout_ref.get("hybrid_engine", True):
        devices = config.trainer.nnodes * config.trainer.n_gpus_per_node
        rollout_worker_lays_out(config, devices)
        route_a_request(config, devices)
    if mode == "separate_async":
        route_a_request(config, None)


def launch_checks(config: DictConfig, validate: bool) -> None:
    """`recipes.launch_checks` on ``config`` itself (a copy of a config costs more than the checks):
    what ``coba_verl.main`` does before Ray, in its order; veRL's ``validate_config`` (in
    ``prepare_config``) only where ``validate``, since no setting walked here is one it refuses."""
    from coba_verl.cpu.launcher import cpu_backend_enabled, standalone_rollout_slots
    from coba_verl.verl_plugin.launch.config_bridge import check_config
    from coba_verl.verl_plugin.main import prepare_config

    check_config(config)
    if cpu_backend_enabled(config):
        standalone_rollout_slots(config)
    if validate:
        prepare_config(config)


@pytest.mark.parametrize(
    ("task", "setting"), recipes.ALL_SETTINGS, ids=[f"{t}-{s}" for t, s in recipes.ALL_SETTINGS]
)
@pytest.mark.parametrize("mode", MODES)
def test_each_start_setting_passes_veRLs_start_or_is_refused_naming_it(recipe_configs, task, setting, mode):
    with installed("cupy"):  # veRL's nccl engine loads, as on a GPU machine with its cupy-cu130 extra
        outcomes = _walk(recipe_configs, task, setting, mode)
    if task == "tiny_cpu":
        return
    refused = {name for name, modes in REFUSED_IN.items() if mode in modes}
    passed = {name for name, modes in PASSED_IN.items() if mode in modes}
    assert {name: outcomes[name] for name in refused if outcomes[name] != "refused"} == {}
    assert {name: outcomes[name] for name in passed if outcomes[name] != "passed"} == {}


def _walk(recipe_configs: dict, task: str, setting: str, mode: str) -> dict[str, str]:
    """Each row of `VARIANTS` walked in ``mode`` on the recipe: refused (and veRL's code stops on
    it) or passed (and veRL's code passes it), by row."""
    outcomes = {}
    for name, overrides, modes in VARIANTS:
        if mode not in modes or (task == "tiny_cpu" and name in GPU_ONLY):
            continue
        config = _with(recipe_configs[task, setting, mode], overrides, mode)
        keys = [key.format(mode=mode) for key in overrides]
        rollout_changed = not overrides or any(key.startswith(ROLLOUT) or key in DEVICES for key in keys)
        try:
            launch_checks(config, validate=not overrides)
        except CobaRefusal as refusal:
            message = str(refusal)
            assert "\n" not in message and overrides, (name, message)
            assert [key for key in keys if re.search(rf"\b{re.escape(key)}=", message)], (name, message)
            with pytest.raises(Exception):  # noqa: B017  veRL's own code stops on it too, whatever its error
                verl_starts(config, mode, rollout_changed)
            outcomes[name] = "refused"
        else:
            verl_starts(config, mode, rollout_changed)
            outcomes[name] = "passed"
    return outcomes


def test_each_engine_whose_module_does_not_import_here_loads_where_the_packages_named_are_installed(
    recipe_configs,
):
    """The engines veRL's registry lacks here, walked through veRL's own condition: each is refused
    naming the packages its module imports (veRL's recorded ImportError names one of them); with
    those installed (stand-ins), veRL's own import of the module registers it, and it passes."""
    from verl.checkpoint_engine import CheckpointEngineRegistry

    from coba_verl.verl_plugin.launch.checkpoint_engines import engine_modules, package_found
    from coba_verl.verl_plugin.launch.config_bridge import check_config

    config = recipe_configs["gsm8k", "qwen2.5_0.5b_instruct", "sync"]
    errors = {module: error.name for module, error in CheckpointEngineRegistry._import_errors.items()}
    walked = {}
    for module in engine_modules():
        stem = module.path.removeprefix("checkpoint_engine/").removesuffix(".py")
        if stem not in errors:
            continue
        missing = [group for group in module.needs if not any(package_found(p) for p in group)]
        assert errors[stem] in {package for group in missing for package in group}, (stem, missing)
        for name in module.names:
            engine = _with(config, {BACKEND: name})
            if name not in CheckpointEngineRegistry._registry:
                with pytest.raises(CobaRefusal, match=rf"{re.escape(BACKEND)}={name} does not load here"):
                    check_config(copy.deepcopy(engine))
                with pytest.raises(ValueError, match=f"Checkpoint engine {name} not registered"):
                    verl_registry_get(name)
            with installed(*(group[0] for group in missing)):
                check_config(copy.deepcopy(engine))
                assert verl_registry_get(name).__module__ == f"verl.checkpoint_engine.{stem}"
        walked[stem] = [" or ".join(group) for group in missing]
    assert walked == {
        "nccl_checkpoint_engine": ["cupy"],
        "hccl_checkpoint_engine": ["vllm", "torch_npu"],
        "nixl_checkpoint_engine": ["cupy", "nixl"],
        "kimi_checkpoint_engine": ["checkpoint_engine"],
        "mooncake_checkpoint_engine": ["mooncake", "vllm or sglang"],
        "delta_checkpoint_engine": ["cupy"],
    }
