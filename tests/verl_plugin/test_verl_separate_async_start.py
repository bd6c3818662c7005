"""``separate_async``'s start-up conditions in veRL, refused before Ray in one line: each refusal is
checked against veRL's own code stopping on the same config (``PPOTrainerSeparateAsync``'s
constructor, the switch's config, the request router over the standalone pool, the old policy's
snapshot, the first step) and the overrides it names against the same code passing."""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import pytest
import yaml
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.launch.config_bridge import check_config
from coba_verl.verl_plugin.main import prepare_config
from tests.verl_plugin.verl_start_code import refusal_of, route_a_request, verl_trainer


@pytest.fixture(scope="module")
def base_1x8(coba_compose, gpu_1x8):
    return coba_compose(gpu_1x8)


DISAGG = "actor_rollout_ref.rollout.disaggregation"
BACKEND = "actor_rollout_ref.rollout.checkpoint_engine.backend"
HEAD = (
    "trainer.v1.trainer_mode=separate_async cannot start with this config; veRL would stop inside Ray, after "
    "Ray and TransferQueue have started: "
)


#: What makes ``base_1x8`` (M = 64, ppo_mini_batch_size = 16, tensor parallel 2) a ``separate_async``
#: config: 64 = 4 (veRL's default parameter_sync_step) x 16, a standalone pool of one node of 8 GPUs
#: (veRL's default rollout.nnodes is 0), a checkpoint engine other than ``naive``.
SEPARATE_ASYNC_FITS = {
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
}
SWITCH = "trainer.v1.separate_async.hybrid_rollout"
STEP = "trainer.v1.separate_async.parameter_sync_step"
MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"


@pytest.fixture
def separate_1x8(base_1x8, cupy_installed):
    """veRL's values of ``base_1x8`` with the overrides ``separate_async`` needs, where veRL's nccl
    checkpoint engine loads (cupy installed)."""
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    for key, value in SEPARATE_ASYNC_FITS.items():
        OmegaConf.update(config, key, value)
    return config


def test_a_separate_async_config_that_fits_passes_ours_and_veRLs_constructor(separate_1x8):
    check_config(copy.deepcopy(separate_1x8))
    trainer = verl_trainer(separate_1x8, "separate_async")
    assert trainer.parameter_sync_step == 4


#: One setting changed from ``separate_1x8``: (key, value, our refusal's words, the override it names,
#: veRL's error, its words). veRL's words are those of its assertion inside
#: ``PPOTrainerSeparateAsync.__init__`` (or of the switch dataclass it builds there, raised through
#: Hydra's instantiation), the same condition on the same values.
SEPARATE_ASYNC_UNFIT = [
    ("data.train_batch_size", 48,
     f"data.train_batch_size=48 must equal {STEP}=4 x {MINI}=16", f"set: {STEP}=3.",
     AssertionError, "train_batch_size must equal parameter_sync_step * ppo_mini_batch_size"),
    (MINI, 32, f"{STEP}=4 x {MINI}=32", f"set: {STEP}=2.", AssertionError, "train_batch_size must equal"),
    (STEP, 2, f"{STEP}=2 x {MINI}=16 (", f"; {MINI}=32 fits as well", AssertionError, "train_batch_size"),
    (STEP, None, f"{STEP} null: data.train_batch_size=64 must equal", f"set: {STEP}=1 {MINI}=64.",
     TypeError, "unsupported operand"),
    ("actor_rollout_ref.rollout.nnodes", 0, "actor_rollout_ref.rollout.nnodes=0 x n_gpus_per_node=8",
     "set: actor_rollout_ref.rollout.nnodes=1.", AssertionError, "nnodes must be > 0"),
    ("actor_rollout_ref.rollout.n_gpus_per_node", 0, "nnodes=1 x n_gpus_per_node=0",
     "set: actor_rollout_ref.rollout.n_gpus_per_node=2.", AssertionError, "n_gpus_per_node must be > 0"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend", "naive", "checkpoint_engine.backend=naive cannot",
     "set: actor_rollout_ref.rollout.checkpoint_engine.backend=nccl.", AssertionError, "nccl/nixl/mooncake"),
    ("reward.reward_model.enable", True, "reward.reward_model.enable=true needs the reward model in its own",
     "set: reward.reward_model.enable_resource_pool=true reward.reward_model.nnodes=1.", AssertionError,
     "Colocate reward model"),
    (f"{SWITCH}.switch_threshold_ratio", 1.5, "switch_threshold_ratio=1.5 is outside (0, 1]",
     f"set: {SWITCH}.switch_threshold_ratio=0.4.",
     InstantiationException, "switch_threshold_ratio must be in (0, 1]"),
    (f"{SWITCH}.switch_cost_window_size", 0, "switch_cost_window_size=0 must be positive",
     f"set: {SWITCH}.switch_cost_window_size=3.",
     InstantiationException, "switch_cost_window_size must be positive"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "ours", "fix", "error", "verls"),
    SEPARATE_ASYNC_UNFIT,
    ids=[c[0] for c in SEPARATE_ASYNC_UNFIT],
)
def test_separate_async_is_refused_before_ray_where_veRLs_constructor_would_stop(
    separate_1x8, key, value, ours, fix, error, verls
):
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, key, value)
    with pytest.raises(CobaRefusal) as refusal:
        check_config(copy.deepcopy(config))
    assert ours in str(refusal.value) and fix in str(refusal.value)
    with pytest.raises(error, match=re.escape(verls)):
        verl_trainer(config, "separate_async")
    fixed = str(refusal.value).split("To launch it, set: ")[1].rstrip(".").split()
    for override in fixed:  # the values the refusal names fit: ours and veRL's constructor pass
        fix_key, fix_value = override.split("=", 1)
        OmegaConf.update(config, fix_key, yaml.safe_load(fix_value))
    check_config(copy.deepcopy(config))
    verl_trainer(config, "separate_async")._init_resource_pool_mgr()  # the pools veRL sizes in init()


def test_hybrid_switch_with_disaggregated_rollout_is_refused_as_veRLs_constructor_does(separate_1x8):
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, f"{SWITCH}.enable_switch", True)
    verl_trainer(config, "separate_async")  # the switch alone is fine
    OmegaConf.update(config, "actor_rollout_ref.rollout.disaggregation.enabled", True)
    with pytest.raises(CobaRefusal, match=f"set: {re.escape(SWITCH)}.enable_switch=false"):
        check_config(copy.deepcopy(config))
    with pytest.raises(ValueError, match="enable_switch does not support rollout disaggregation"):
        verl_trainer(config, "separate_async")


def test_every_unfit_setting_is_named_in_one_refusal(base_1x8, cupy_installed):
    """veRL's recipe values under separate_async: three unfit settings, one line naming them all."""
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    OmegaConf.update(config, "actor_rollout_ref.actor.ppo_mini_batch_size", 32)
    with pytest.raises(CobaRefusal) as refusal:
        prepare_config(config)
    message = str(refusal.value)
    assert "\n" not in message
    assert message.endswith(
        f"To launch it, set: {STEP}=2 actor_rollout_ref.rollout.nnodes=1 "
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl."
    )


def test_a_standalone_pool_smaller_than_one_rollout_engine_is_refused(separate_1x8):
    """veRL starts pool // (tensor x data x pipeline parallel) standalone engines and asserts nothing:
    a 1-GPU pool under tensor parallel 2 starts none, and veRL's request router has no server."""
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.n_gpus_per_node", 1)
    pool = "of at least one rollout engine of 2 .*set: actor_rollout_ref.rollout.n_gpus_per_node=2."
    with pytest.raises(CobaRefusal, match=pool):
        check_config(copy.deepcopy(config))
    with pytest.raises(RuntimeError, match="No available servers"):
        route_a_request(config, None)
    OmegaConf.update(config, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1)
    check_config(copy.deepcopy(config))
    assert route_a_request(config, None) == 1


@pytest.mark.parametrize(
    ("strategy", "refused"), [("fsdp2", False), ("megatron", False), ("torchtitan", True)]
)
def test_an_actor_strategy_without_veRLs_old_policy_snapshot_is_refused(separate_1x8, strategy, refused):
    """veRL's DetachActorWorker keeps separate_async's old policy in host memory for some strategies
    only; for the others it fails at the first local update, inside Ray: its first old-log-prob pass
    saves the weights (trainer_separate_async.py:202-203), which asks for the strategy's handlers."""
    from verl.experimental.separation.engine_workers import DetachActorWorker

    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.actor.strategy", strategy)
    worker = SimpleNamespace(config=config.actor_rollout_ref, _strategy_handlers=None)
    if refused:
        with pytest.raises(CobaRefusal, match=f"strategy={strategy} cannot keep the old policy") as refusal:
            check_config(copy.deepcopy(config))
        assert "fails at the first local update, as it saves the old policy" in str(refusal.value)
        with pytest.raises(NotImplementedError, match=f"Unsupported strategy: {strategy}"):
            DetachActorWorker._get_strategy_handlers(worker)
    else:
        check_config(copy.deepcopy(config))
        if strategy == "fsdp2":  # megatron's helpers need Megatron installed
            assert len(DetachActorWorker._get_strategy_handlers(worker)) == 2


def test_colocate_async_local_updates_that_do_not_divide_the_batch_are_refused_like_veRLs_first_step(
    base_1x8,
):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "colocate_async")
    OmegaConf.update(config, "trainer.v1.colocate_async.parameter_sync_step", 3, force_add=True)
    with pytest.raises(CobaRefusal, match="set: trainer.v1.colocate_async.parameter_sync_step=2."):
        check_config(copy.deepcopy(config))
    trainer = verl_trainer(config, "colocate_async")
    with pytest.raises(
        AssertionError, match=r"train_batch_size \(64\) must be divisible by parameter_sync_step"
    ):
        trainer.step({}, {})
    OmegaConf.update(config, "trainer.v1.colocate_async.parameter_sync_step", 2)
    check_config(copy.deepcopy(config))


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async", "coba_colocate_async"])
def test_sglang_is_refused_by_name_in_the_async_modes_with_the_reason_and_vllm(separate_1x8, mode):
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", mode)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "sglang")
    with pytest.raises(CobaRefusal) as refusal:
        check_config(config)
    message = str(refusal.value)
    assert message.startswith(
        "actor_rollout_ref.rollout.name=sglang is refused with trainer.v1.trainer_mode="
    )
    assert (
        "async_sglang_server.py:661-676" in message and "Use actor_rollout_ref.rollout.name=vllm" in message
    )
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "vllm")
    check_config(config)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "sglang")
    OmegaConf.update(config, "trainer.v1.trainer_mode", "sync")
    check_config(config)  # sync never aborts a request: SGLang is fine there


def test_the_start_rules_follow_veRL_0_9_1s_code_and_step_aside_for_another(
    separate_1x8, monkeypatch, caplog
):
    """Each rule stands for a piece of veRL's code, checked by its source digest: the installed veRL is
    0.9.1, so every rule applies; against another code the rule is left to veRL, with a WARNING."""
    from coba_verl.verl_plugin.launch import verl_code

    for rule, code in verl_code.VERL_START_CODE.items():
        assert verl_code.verl_source_sha256(code.path, code.qualname) == code.sha256, rule
    assert verl_code.verl_source_sha256(code.path, "PPOTrainer.no_such_method") is None
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.checkpoint_engine.backend", "naive")
    with pytest.raises(CobaRefusal):
        check_config(copy.deepcopy(config))
    changed = verl_code.VERL_START_CODE["separate_async"]._replace(sha256="0" * 64)
    monkeypatch.setitem(verl_code.VERL_START_CODE, "separate_async", changed)
    verl_code._say_code_changed.cache_clear()
    with caplog.at_level("WARNING", logger=verl_code.__name__):
        check_config(copy.deepcopy(config))  # left to veRL, which still stops on it
    assert (
        "PPOTrainerSeparateAsync.__init__ (verl/trainer/ppo/v1/trainer_separate_async.py) is not"
        in caplog.text
    )
    verl_code._say_code_changed.cache_clear()
    with pytest.raises(AssertionError, match="nccl/nixl/mooncake"):
        verl_trainer(config, "separate_async")


def test_a_standalone_pool_smaller_than_a_disaggregated_engine_is_refused(separate_1x8):
    """Under disaggregation an engine is (tensor parallel x prefill_replicas + decode tensor parallel x
    decode_replicas) x data x pipeline parallel devices (llm_server.py:441-454), not 1."""
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "vllm")
    OmegaConf.update(config, f"{DISAGG}.enabled", True)
    OmegaConf.update(config, "actor_rollout_ref.rollout.n_gpus_per_node", 3)
    assert refusal_of(config) == (
        "trainer.v1.trainer_mode=separate_async cannot start with this config; veRL would stop inside Ray, "
        "after Ray and TransferQueue have started: actor_rollout_ref.rollout.nnodes=1 x n_gpus_per_node=3: "
        "separate_async generates on a standalone rollout pool of that many devices besides the trainer's "
        "trainer.nnodes x trainer.n_gpus_per_node (trainer_separate_async.py:64-67), of at least one rollout "
        "engine of 4 (disaggregated: (actor_rollout_ref.rollout.tensor_model_parallel_size=2 x "
        "disaggregation.prefill_replicas=1 + decode_tensor_model_parallel_size=2 x decode_replicas=1) x "
        "data_parallel_size=1 x pipeline_model_parallel_size=1; llm_server.py:434-460). To launch it, set: "
        "actor_rollout_ref.rollout.n_gpus_per_node=4."
    )
    with pytest.raises(RuntimeError, match="No available servers"):  # veRL's router has none
        route_a_request(config, None)
    OmegaConf.update(config, "actor_rollout_ref.rollout.n_gpus_per_node", 4)
    check_config(copy.deepcopy(config))
    assert route_a_request(config, None) == 1


def test_the_refusal_of_naive_names_only_engines_that_load_here(base_1x8):
    """veRL's nccl engine needs cupy, which ``verl[vllm]`` does not install: where no engine but naive
    loads, the refusal names what to install and no override; where cupy is, the engines it loads."""
    from tests.verl_plugin.verl_start_code import installed

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    OmegaConf.update(config, "actor_rollout_ref.rollout.nnodes", 1)
    naive = (
        f"{HEAD}{BACKEND}=naive cannot send weights to a standalone rollout pool "
        "(trainer_separate_async.py:68-70); of veRL's engines, "
    )
    assert refusal_of(config) == naive + (
        "none but naive loads here: nccl needs cupy, which is not installed "
        '(pip install "verl[cupy-cu130]==0.9.1").'
    )
    with installed("cupy"):
        assert (
            refusal_of(config) == naive + f"nccl, delta_sharded load here. To launch it, set: {BACKEND}=nccl."
        )
        OmegaConf.update(config, BACKEND, "nccl")
        check_config(copy.deepcopy(config))
    with pytest.raises(AssertionError, match="please use nccl/nixl/mooncake"):
        verl_trainer(_with(config, {BACKEND: "naive"}), "separate_async")


def _with(config, overrides: dict):
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        OmegaConf.update(config, key, value)
    return config


def test_the_hybrid_switch_without_hybrid_replicas_is_let_through_as_veRL_turns_it_off(separate_1x8, caplog):
    """With ``actor_rollout_ref.hybrid_engine=false`` veRL warns that the switch is ignored and starts
    (trainer_separate_async.py:89-94), disaggregated rollout or not: a warning here too, no refusal."""
    config = _with(separate_1x8, {f"{SWITCH}.enable_switch": True, f"{DISAGG}.enabled": True,
                                  "actor_rollout_ref.rollout.name": "vllm"})  # fmt: skip
    assert "enable_switch=true does not work with" in refusal_of(config)  # hybrid replicas: refused
    OmegaConf.update(config, "actor_rollout_ref.hybrid_engine", False)
    with caplog.at_level("WARNING", logger="coba_verl.verl_plugin.launch.separate_async_start"):
        check_config(copy.deepcopy(config))
    assert f"{SWITCH}.enable_switch=true is ignored with actor_rollout_ref.hybrid_engine=false" in caplog.text
    with caplog.at_level("WARNING", logger="verl.trainer.ppo.v1.trainer_separate_async"):
        trainer = verl_trainer(config, "separate_async")
    assert trainer.hybrid_rollout_config.enable_switch is False


@pytest.mark.parametrize("pool", [False, True])
def test_a_reward_model_of_null_nodes_is_refused_in_one_line(separate_1x8, pool):
    config = _with(separate_1x8, {"reward.reward_model.enable": True, "reward.reward_model.nnodes": None,
                                  "reward.reward_model.enable_resource_pool": pool})  # fmt: skip
    message = refusal_of(config)
    assert "reward.reward_model.nnodes=null x n_gpus_per_node=8" in message
    assert message.endswith(
        "To launch it, set: reward.reward_model.enable_resource_pool=true reward.reward_model.nnodes=1."
        if not pool
        else "To launch it, set: reward.reward_model.nnodes=1."
    )
    with pytest.raises((AssertionError, TypeError)):  # veRL: the colocated model's assertion, or null <= 0
        verl_trainer(config, "separate_async")._init_resource_pool_mgr()


def test_training_devices_without_hybrid_replicas_need_not_divide_into_rollout_engines(separate_1x8):
    """Without hybrid replicas the training devices' worker is veRL's ``actor`` alone, which lays out
    no rollout engine (trainer_base.py:801-806): 6 devices under tensor parallel 4 are fine there."""
    from verl.trainer.ppo.ray_trainer import Role

    six = {"trainer.n_gpus_per_node": 6, "actor_rollout_ref.rollout.tensor_model_parallel_size": 4,
           "actor_rollout_ref.rollout.name": "vllm", "data.train_batch_size": 48, MINI: 12}  # fmt: skip
    config = _with(separate_1x8, six)
    assert "6 training devices are not divisible by the rollout engine's 4" in refusal_of(config)
    OmegaConf.update(config, "actor_rollout_ref.hybrid_engine", False)
    check_config(copy.deepcopy(config))
    trainer = verl_trainer(config, "separate_async")
    trainer._init_resource_pool_mgr()
    assert Role.Actor in trainer.role_worker_mapping
    assert not [role for role in trainer.role_worker_mapping if "rollout" in str(role)]  # none on them
