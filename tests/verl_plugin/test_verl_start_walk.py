"""Every recipe in every V1 mode, with each start-up setting veRL checks inside Ray set to a bad value
and to one that fits: the config either gets through veRL's own start-up code that runs without Ray
or is refused before Ray in one line naming the setting, and a refused one is one veRL stops on.

veRL's start-up code here (`verl_starts`): the constructor of its trainer class for the mode (where
the replay buffer is built), the resource-pool setup of ``init`` (``_init_resource_pool_mgr``), its
``RolloutConfig``, its checkpoint-engine registry, and the count of rollout servers its
``LLMServerManager`` starts on the training devices and on ``separate_async``'s standalone pool. A
setting that meets another veRL check makes this walk fail, and so is found here.
"""

from __future__ import annotations

import asyncio
import copy
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from coba_verl.refusal import CobaRefusal
from tests.recipes import test_recipes as recipes

pytestmark = pytest.mark.slow

MODES = ("sync", "colocate_async", "separate_async")
REWARD = "reward.reward_model"
DAPO = "algorithm.filter_groups"
SAMPLER = "trainer.v1.sampler"
DISAGGREGATION = "actor_rollout_ref.rollout.disaggregation"
BACKEND = "actor_rollout_ref.rollout.checkpoint_engine.backend"

#: (name, overrides): each start-up setting at a bad value and at one that fits (the recipe's own
#: value, veRL's default, is the ``default`` row).
VARIANTS: list[tuple[str, dict]] = [
    ("default", {}),
    ("reward_pool_nnodes_0", {f"{REWARD}.enable_resource_pool": True}),
    ("reward_pool_gpus_0", {f"{REWARD}.enable_resource_pool": True, f"{REWARD}.nnodes": 1,
                            f"{REWARD}.n_gpus_per_node": 0}),
    ("reward_pool_fits", {f"{REWARD}.enable_resource_pool": True, f"{REWARD}.nnodes": 1}),
    ("dapo_metric_null", {f"{DAPO}.enable": True, f"{DAPO}.metric": None}),
    ("dapo_metric_reward", {f"{DAPO}.enable": True, f"{DAPO}.metric": "reward"}),
    ("dapo_colocated_rm", {f"{DAPO}.enable": True, f"{DAPO}.metric": "reward", f"{REWARD}.enable": True}),
    ("dapo_rm_own_pool", {f"{DAPO}.enable": True, f"{DAPO}.metric": "reward", f"{REWARD}.enable": True,
                          f"{REWARD}.enable_resource_pool": True, f"{REWARD}.nnodes": 1}),
    ("off_policy_strategy_keep", {f"{SAMPLER}.max_off_policy_strategy": "keep"}),
    ("off_policy_strategy_wait", {f"{SAMPLER}.max_off_policy_strategy": "wait"}),
    ("off_policy_threshold_0", {f"{SAMPLER}.max_off_policy_threshold": 0}),
    ("off_policy_threshold_null", {f"{SAMPLER}.max_off_policy_threshold": None}),
    ("checkpoint_engine_unknown", {BACKEND: "gloo"}),
    ("disaggregated", {f"{DISAGGREGATION}.enabled": True}),
    ("disaggregated_8_prefill", {f"{DISAGGREGATION}.enabled": True, f"{DISAGGREGATION}.prefill_replicas": 8}),
]  # fmt: skip


def _with(config: DictConfig, overrides: dict) -> DictConfig:
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        OmegaConf.update(config, key, value)
    return config


@pytest.fixture(scope="module")
def recipe_configs() -> dict[tuple[str, str, str], DictConfig]:
    """Each recipe in each V1 mode as it launches: composed once per recipe; ``separate_async`` with
    the overrides its refusal names (the recipes are written for the other modes)."""
    configs = {}
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
    return configs


def _registered_where_it_cannot_import(backend: str) -> bool:
    """``backend`` is registered by one of veRL's engine modules that did not import here (no cupy,
    nixl...): veRL registers it where that library is."""
    from verl.checkpoint_engine import CheckpointEngineRegistry

    folder = Path(CheckpointEngineRegistry.get.__code__.co_filename).parent
    sources = [(folder / f"{module}.py").read_text() for module in CheckpointEngineRegistry._import_errors]
    return any(f'CheckpointEngineRegistry.register("{backend}")' in source for source in sources)


class _Server:
    """veRL's rollout replica, counted and not started."""

    def __init__(self, **kwargs):
        self._server_handle = self._server_address = None

    async def init_hybrid(self, worker_group):
        pass

    async def init_standalone(self):
        pass


def _servers(config: DictConfig, devices: int | None) -> int:
    """The rollout servers veRL's ``LLMServerManager`` starts on ``devices`` training devices (None:
    the standalone pool of ``rollout.nnodes x n_gpus_per_node``)."""
    from verl.workers.rollout.llm_server import LLMServerManager

    class Manager(LLMServerManager):
        rollout_replica_class = _Server

    group = None if devices is None else SimpleNamespace(world_size=devices)
    manager = Manager(config=config, worker_group=group)
    asyncio.run(manager._initialize_llm_servers())
    return len(manager.rollout_replicas)


def verl_starts(config: DictConfig, mode: str, rollout_changed: bool = True) -> None:
    """veRL's start-up code for ``mode`` that runs without Ray, on ``config`` itself (which it changes);
    raises where veRL would stop (or, for the rollout servers, start none). veRL's ``RolloutConfig``
    only where ``rollout_changed`` (it costs as much as the rest together; of the settings walked,
    it reads disaggregation's)."""
    from verl.checkpoint_engine import CheckpointEngineRegistry
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
    if rollout_changed:
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    backend = OmegaConf.select(config, BACKEND)
    if backend not in CheckpointEngineRegistry._registry and not _registered_where_it_cannot_import(backend):
        CheckpointEngineRegistry.get(backend)  # raises veRL's "not registered"
    if mode != "separate_async" or config.actor_rollout_ref.get("hybrid_engine", True):
        devices = config.trainer.nnodes * config.trainer.n_gpus_per_node
        assert _servers(config, devices) >= 1, "no rollout server on the training devices"
    if mode == "separate_async":
        assert _servers(config, None) >= 1, "no rollout server in the standalone pool"


def launch_checks(config: DictConfig, validate: bool) -> None:
    """`recipes.launch_checks` on ``config`` itself (a copy of a config costs more than the checks):
    what ``coba_verl.main`` does before Ray, in its order; veRL's ``validate_config`` (in
    ``prepare_config``) only where ``validate``, since no setting walked here is one it reads."""
    from coba_verl.cpu.launcher import cpu_backend_enabled, standalone_rollout_slots
    from coba_verl.verl_plugin.launch.config_bridge import check_config
    from coba_verl.verl_plugin.main import prepare_config

    check_config(config)
    if cpu_backend_enabled(config):
        standalone_rollout_slots(config)
    if validate:
        prepare_config(config)


#: The variants veRL must refuse, and those it must let through.
BAD = {"reward_pool_nnodes_0", "reward_pool_gpus_0", "dapo_metric_null", "dapo_colocated_rm",
       "off_policy_strategy_keep", "off_policy_threshold_0", "checkpoint_engine_unknown"}  # fmt: skip
FITS = {"default", "reward_pool_fits", "dapo_metric_reward", "dapo_rm_own_pool", "off_policy_strategy_wait",
        "off_policy_threshold_null"}  # fmt: skip


@pytest.mark.parametrize(
    ("task", "setting"), recipes.ALL_SETTINGS, ids=[f"{t}-{s}" for t, s in recipes.ALL_SETTINGS]
)
@pytest.mark.parametrize("mode", MODES)
def test_each_start_setting_passes_veRLs_start_or_is_refused_naming_it(recipe_configs, task, setting, mode):
    outcomes = {}
    for name, overrides in VARIANTS:
        config = _with(recipe_configs[task, setting, mode], overrides)
        rollout_changed = not overrides or any(key.startswith(DISAGGREGATION) for key in overrides)
        try:
            launch_checks(config, validate=not overrides)
        except CobaRefusal as refusal:
            message = str(refusal)
            assert "\n" not in message and overrides, (name, message)
            assert [key for key in overrides if re.search(rf"\b{re.escape(key)}=", message)], (name, message)
            with pytest.raises(Exception):  # noqa: B017  veRL stops on it too, whatever its error
                verl_starts(config, mode, rollout_changed)
            outcomes[name] = "refused"
        else:
            verl_starts(config, mode, rollout_changed)
            outcomes[name] = "passed"
    assert {name: outcomes[name] for name in BAD if outcomes[name] != "refused"} == {}
    assert {name: outcomes[name] for name in FITS if outcomes[name] != "passed"} == {}
