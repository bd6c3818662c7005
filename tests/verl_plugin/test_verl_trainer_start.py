"""veRL's start-up conditions that every trainer meets inside Ray, refused before Ray in one line:
each refusal here is checked against veRL's own code stopping on the same config (its trainer
classes' constructors, resource-pool setup, rollout config, checkpoint-engine registry, rollout
worker and request router), and the overrides it names against the same code passing."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import yaml
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from coba_verl.verl_plugin.launch.config_bridge import check_config
from tests.verl_plugin.verl_start_code import (
    installed,
    refusal_of,
    rollout_worker_lays_out,
    route_a_request,
    verl_registry_get,
    verl_trainer,
)


@pytest.fixture(scope="module")
def base_1x8(coba_compose, gpu_1x8):
    return coba_compose(gpu_1x8)


V1_HEAD = (
    "trainer.v1.trainer_mode=sync cannot start with this config; veRL would stop inside Ray, after Ray and "
    "TransferQueue have started: "
)
CLASSIC_HEAD = (
    "the classic trainer (trainer.use_v1=false) cannot start with this config; veRL would stop inside Ray, "
    "after Ray has started: "
)
REWARD = "reward.reward_model"
SAMPLER = "trainer.v1.sampler"
DISAGG = "actor_rollout_ref.rollout.disaggregation"
REWARD_POOL = (
    f"{REWARD}.enable_resource_pool=true puts the reward model in its own pool of {REWARD}.nnodes=0 x "
    "n_gpus_per_node=8 devices, both of which must be above 0 (veRL's default nnodes is 0; "
)


def test_a_reward_pool_of_no_node_is_refused_in_v1_as_veRLs_resource_pool_setup_stops(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    assert refusal_of(config) == (
        V1_HEAD + REWARD_POOL + f"trainer_base.py:823-827). To launch it, set: {REWARD}.nnodes=1."
    )
    with pytest.raises(ValueError, match="reward_model.nnodes must be greater than 0"):
        verl_trainer(config, "sync")._init_resource_pool_mgr()
    OmegaConf.update(config, f"{REWARD}.n_gpus_per_node", 0)
    assert refusal_of(config).endswith(f"set: {REWARD}.nnodes=1 {REWARD}.n_gpus_per_node=1.")
    OmegaConf.update(config, f"{REWARD}.nnodes", 1)
    OmegaConf.update(config, f"{REWARD}.n_gpus_per_node", 1)
    check_config(copy.deepcopy(config))
    verl_trainer(config, "sync")._init_resource_pool_mgr()


def test_a_reward_pool_of_no_node_is_refused_in_the_classic_trainer_as_its_task_runner_stops(base_1x8):
    from verl.trainer.main_ppo_v0 import BaseTaskRunner

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.use_v1", False)
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    assert refusal_of(config) == (
        "the classic trainer (trainer.use_v1=false) cannot start with this config; veRL would stop inside "
        f"Ray, after Ray has started: {REWARD_POOL}main_ppo_v0.py:75-79). "
        f"To launch it, set: {REWARD}.nnodes=1."
    )
    with pytest.raises(ValueError, match="reward_model.nnodes must be greater than 0"):
        BaseTaskRunner.init_resource_pool_mgr(SimpleNamespace(mapping={}), config)


DAPO_METRIC = (
    "algorithm.filter_groups.metric={}: DAPO dynamic sampling (algorithm.filter_groups.enable=true) keeps "
    "the groups whose metric varies, so veRL needs one: reward (the pre-KL reward) or a reward_extra_info "
    "field such as acc (trainer_base.py:194-196)"
)


@pytest.mark.parametrize(("metric", "shown"), [(None, "null"), ("", "''")])
def test_dapo_without_a_metric_is_refused_as_every_v1_trainers_constructor_stops(base_1x8, metric, shown):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True)
    OmegaConf.update(config, "algorithm.filter_groups.metric", metric)
    assert refusal_of(config) == (
        V1_HEAD + DAPO_METRIC.format(shown) + ". To launch it, set: algorithm.filter_groups.metric=reward."
    )
    for mode in ("sync", "colocate_async"):
        with pytest.raises(ValueError, match="algorithm.filter_groups.metric must be set"):
            verl_trainer(config, mode)
    OmegaConf.update(config, "algorithm.filter_groups.metric", "reward")
    check_config(copy.deepcopy(config))
    verl_trainer(config, "sync")


def test_dapo_with_a_colocated_reward_model_is_refused_as_every_v1_trainers_constructor_stops(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True)
    OmegaConf.update(config, "algorithm.filter_groups.metric", "reward")
    OmegaConf.update(config, f"{REWARD}.enable", True)
    assert refusal_of(config) == (
        V1_HEAD + f"{REWARD}.enable=true with {REWARD}.enable_resource_pool=false: DAPO dynamic sampling "
        "needs the reward at sampling time, and a colocated reward model computes it only after "
        f"(trainer_base.py:198-204). To launch it, set: {REWARD}.enable_resource_pool=true {REWARD}.nnodes=1."
    )
    with pytest.raises(AssertionError, match="requires the reward metric at sampling time"):
        verl_trainer(config, "colocate_async")
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    OmegaConf.update(config, f"{REWARD}.nnodes", 1)
    check_config(copy.deepcopy(config))
    verl_trainer(config, "colocate_async")._init_resource_pool_mgr()


@pytest.mark.parametrize(
    ("key", "value", "reason", "fix", "verls"),
    [
        ("max_off_policy_strategy", "keep", "max_off_policy_strategy=keep is not one of drop, wait "
         "(replay_buffer.py:175-177)", "max_off_policy_strategy=drop", "Invalid max off policy strategy"),
        ("max_off_policy_threshold", 0, "max_off_policy_threshold=0 is neither a positive integer nor null "
         "(replay_buffer.py:165-169)", "max_off_policy_threshold=8", "Invalid max off policy threshold"),
        ("max_off_policy_threshold", 2.5, "max_off_policy_threshold=2.5 is neither a positive integer nor "
         "null (replay_buffer.py:165-169)", "max_off_policy_threshold=8", "Invalid max off policy threshold"),
    ],
)  # fmt: skip
def test_off_policy_settings_veRLs_replay_buffer_rejects_are_refused(
    base_1x8, key, value, reason, fix, verls
):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{SAMPLER}.{key}", value)
    assert refusal_of(config) == f"{V1_HEAD}{SAMPLER}.{reason}. To launch it, set: {SAMPLER}.{fix}."
    with pytest.raises(AssertionError, match=verls):
        verl_trainer(config, "sync")
    OmegaConf.update(config, f"{SAMPLER}.{key}", yaml.safe_load(fix.split("=")[1]))
    check_config(copy.deepcopy(config))
    OmegaConf.update(config, f"{SAMPLER}.max_off_policy_threshold", None)  # null: no bound, as veRL allows
    check_config(copy.deepcopy(config))
    verl_trainer(config, "sync")


def test_a_custom_sampler_keeps_its_own_replay_buffer_rules(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{SAMPLER}.max_off_policy_strategy", "keep")
    OmegaConf.update(config, f"{SAMPLER}.custom_sampler.path", "/x/sampler.py")
    OmegaConf.update(config, f"{SAMPLER}.custom_sampler.name", "MySampler")
    check_config(copy.deepcopy(config))


BACKEND = "actor_rollout_ref.rollout.checkpoint_engine.backend"
ENGINES = "delta_sharded, kimi_ckpt_engine, mooncake, naive, nccl, nixl"
#: How veRL's own requirements install cupy (its ``cupy-cu130`` extra).
CUPY = '(pip install "verl[cupy-cu130]==0.9.1")'


def test_a_checkpoint_engine_veRL_does_not_register_is_refused_by_name(base_1x8):
    from verl.checkpoint_engine import CheckpointEngineRegistry

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, BACKEND, "gloo")
    assert refusal_of(config) == (
        f"{V1_HEAD}{BACKEND}=gloo is no checkpoint engine veRL registers ({ENGINES}; "
        f"checkpoint_engine/base.py:93-98). To launch it, set: {BACKEND}=naive."
    )
    with pytest.raises(ValueError, match="Checkpoint engine gloo not registered"):
        CheckpointEngineRegistry.get("gloo")
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    OmegaConf.update(config, "actor_rollout_ref.rollout.nnodes", 1)
    assert refusal_of(config).endswith(  # naive is refused there, and no other engine loads here
        f"; of veRL's engines, none but naive loads here: nccl needs cupy, which is not installed {CUPY}."
    )
    with installed("cupy"):
        assert refusal_of(config).endswith(f"To launch it, set: {BACKEND}=nccl.")
    OmegaConf.update(config, BACKEND.replace("backend", "custom_backend_module"), "my.engines")
    check_config(copy.deepcopy(config))  # a module of one's own may register it: left to veRL


def test_the_checkpoint_engines_read_from_veRLs_source_are_those_its_registry_holds():
    """Read without importing: every engine veRL's registry holds here (the others need cupy, nixl...)
    is among them, the CPU backend adds its own, and each module's needs are its imports."""
    from verl.checkpoint_engine import CheckpointEngineRegistry

    from coba_verl.cpu import CHECKPOINT_ENGINE_BACKEND
    from coba_verl.verl_plugin.launch.checkpoint_engines import engine_modules, engine_names, loading_engines

    assert ", ".join(engine_names()) == ENGINES
    assert set(CheckpointEngineRegistry._registry) - {CHECKPOINT_ENGINE_BACKEND} == set(loading_engines())
    optional = {
        module.path.removeprefix("checkpoint_engine/"): (
            module.names,
            [group for group in module.needs if group[0] not in ("ray", "torch", "zmq")],
        )
        for module in engine_modules()
    }
    assert optional == {
        "base.py": (("naive",), []),
        "nccl_checkpoint_engine.py": (("nccl",), [("cupy",)]),
        "hccl_checkpoint_engine.py": (("nccl",), [("vllm",), ("torch_npu",)]),
        "nixl_checkpoint_engine.py": (("nixl",), [("cupy",), ("nixl",)]),
        "kimi_checkpoint_engine.py": (("kimi_ckpt_engine",), [("checkpoint_engine",)]),
        "mooncake_checkpoint_engine.py": (("mooncake",), [("mooncake",), ("vllm", "sglang")]),
        "delta_checkpoint_engine.py": (("delta_sharded",), [("cupy",)]),
    }


def test_a_checkpoint_engine_whose_module_does_not_import_here_is_refused_naming_what_to_install(base_1x8):
    """veRL registers nccl only where its module imports, and that imports cupy, which ``verl[vllm]``
    does not install: veRL's registry here has no nccl, and a run with it would stop inside Ray."""
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, BACKEND, "nccl")
    assert refusal_of(config) == (
        f"{V1_HEAD}{BACKEND}=nccl does not load here: veRL registers it where "
        "verl/checkpoint_engine/nccl_checkpoint_engine.py imports, which needs cupy, not installed here "
        f'(pip install "verl[cupy-cu130]==0.9.1"; checkpoint_engine/__init__.py). '
        f"To launch it, set: {BACKEND}=naive."
    )
    with pytest.raises(ValueError, match="Checkpoint engine nccl not registered.*No module named 'cupy'"):
        verl_registry_get("nccl")
    with installed("cupy"):
        check_config(copy.deepcopy(config))
        assert verl_registry_get("nccl").__name__ == "NCCLCheckpointEngine"


def test_the_cpu_backends_checkpoint_engine_passes_and_others_are_named(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba_cpu.enable", True, force_add=True)
    OmegaConf.update(config, BACKEND, "ray_object_store")
    check_config(copy.deepcopy(config))
    OmegaConf.update(config, BACKEND, "gloo")
    assert f"({ENGINES}, ray_object_store; checkpoint_engine/base.py:93-98)" in refusal_of(config)


def test_disaggregation_with_a_rollout_veRL_cannot_split_is_refused_as_its_rollout_config_stops(base_1x8):
    from verl.utils.config import omega_conf_to_dataclass

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "hf")
    OmegaConf.update(config, f"{DISAGG}.enabled", True)
    assert refusal_of(config) == (
        f"{V1_HEAD}{DISAGG}.enabled=true needs actor_rollout_ref.rollout.name in sglang, vllm, not hf "
        f"(workers/config/rollout.py:341-344). To launch it, set: {DISAGG}.enabled=false."
    )
    with pytest.raises(InstantiationException, match=r"disaggregation.enabled=True requires rollout.name in"):
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)


def test_training_devices_smaller_than_a_disaggregated_engine_are_refused_as_veRL_starts_no_server(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "vllm")
    OmegaConf.update(config, f"{DISAGG}.enabled", True)
    assert route_a_request(config, 8) == 2  # (2 + 2) devices an engine under tensor parallel 2
    OmegaConf.update(config, f"{DISAGG}.prefill_replicas", 4)
    assert refusal_of(config) == (
        f"{V1_HEAD}trainer.nnodes=1 x trainer.n_gpus_per_node=8 devices hold no rollout engine of 10 "
        "(disaggregated: (actor_rollout_ref.rollout.tensor_model_parallel_size=2 x "
        "disaggregation.prefill_replicas=4 + decode_tensor_model_parallel_size=2 x decode_replicas=1) x "
        "data_parallel_size=1 x pipeline_model_parallel_size=1), so veRL would start no rollout server on "
        f"them (llm_server.py:434-460). To launch it, set: {DISAGG}.enabled=false."
    )
    with pytest.raises(RuntimeError, match="No available servers"):  # veRL's router has none
        route_a_request(config, 8)


SIX_GPUS = {
    "trainer.n_gpus_per_node": 6,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 4,
    "actor_rollout_ref.rollout.name": "vllm",
    "data.train_batch_size": 48,
}


@pytest.mark.parametrize("v1", [True, False])
def test_training_devices_the_rollout_engine_does_not_divide_are_refused_as_veRLs_rollout_worker_asserts(
    base_1x8, v1
):
    """6 devices under tensor parallel 4 pass veRL's validate_config and start Ray, then fail in the
    rollout worker (engine_workers.py:655-661): refused before, with the numbers and 4 devices."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = copy.deepcopy(base_1x8)
    for key, value in {**SIX_GPUS, "trainer.use_v1": v1}.items():
        OmegaConf.update(config, key, value)
    head = V1_HEAD if v1 else CLASSIC_HEAD
    assert refusal_of(config) == (
        f"{head}trainer.nnodes=1 x trainer.n_gpus_per_node=6 = 6 training devices are not divisible by the "
        "rollout engine's 4 (actor_rollout_ref.rollout.tensor_model_parallel_size=4 x data_parallel_size=1 x "
        "pipeline_model_parallel_size=1), which veRL's rollout worker asserts as it lays them out "
        "(engine_workers.py:655-661). "
        "To launch it, set: trainer.n_gpus_per_node=4."
    )
    validate_config(config, need_reference_policy(config), need_critic(config))  # lets it through
    with pytest.raises(AssertionError, match="rollout world_size: 6 is not divisible by infer_world_size: 4"):
        rollout_worker_lays_out(config, 6)
    OmegaConf.update(config, "trainer.n_gpus_per_node", 4)
    check_config(copy.deepcopy(config))
    rollout_worker_lays_out(config, 4)


def test_a_reward_pool_of_null_nodes_is_refused_naming_null(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    OmegaConf.update(config, f"{REWARD}.nnodes", None)
    assert refusal_of(config) == (
        f"{V1_HEAD}{REWARD}.enable_resource_pool=true puts the reward model in its own pool of "
        f"{REWARD}.nnodes=null x n_gpus_per_node=8 devices, both of which must be above 0 (veRL's default "
        f"nnodes is 0; trainer_base.py:823-827). To launch it, set: {REWARD}.nnodes=1."
    )
    with pytest.raises(TypeError):  # veRL compares null with 0
        verl_trainer(config, "sync")._init_resource_pool_mgr()
