"""Start-up of veRL runs: the CPU backend's refusals and settings, a GPU run without GPUs stopping at once."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from coba_verl.cpu import launcher
from coba_verl.refusal import CobaRefusal

REPO = Path(__file__).resolve().parents[2]


def tiny_config(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "recipes/tiny_cpu/config"), version_base=None):
        return compose(config_name="tiny", overrides=list(overrides))


def test_cpu_group_is_found_by_the_coba_trainer_config():
    config_dir = str(resources.files("coba_verl") / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="coba_trainer", overrides=["+coba_cpu=cpu"])
    assert launcher.cpu_backend_enabled(config)
    assert config.actor_rollout_ref.rollout.name == "hf" and config.trainer.device == "cpu"


def test_cpu_backend_is_refused_where_cuda_is_present_unless_asked_for(monkeypatch):
    monkeypatch.setattr(launcher, "_cuda_present", lambda: True)
    with pytest.raises(CobaRefusal, match="torch sees CUDA.*coba_cpu.allow_with_cuda=true"):
        launcher.prepare_cpu_run(tiny_config())


def test_cpu_backend_refuses_an_overridden_setting_it_cannot_run(monkeypatch):
    monkeypatch.setattr(launcher, "_cuda_present", lambda: False)
    with pytest.raises(ValueError, match="actor_rollout_ref.rollout.name=vllm cannot run on the CPU backend"):
        launcher.prepare_cpu_run(tiny_config("actor_rollout_ref.rollout.name=vllm"))


SEPARATE_ASYNC = ("trainer.v1.trainer_mode=separate_async", "trainer.v1.separate_async.parameter_sync_step=2")
POOL = ("actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=2")


def test_separate_async_on_cpu_sends_weights_through_the_object_store_and_counts_its_pool_slots():
    config = tiny_config(*SEPARATE_ASYNC, *POOL)
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "naive"  # veRL's default
    assert launcher.standalone_rollout_slots(config) == 2
    assert config.actor_rollout_ref.rollout.checkpoint_engine.backend == "ray_object_store"
    assert launcher.standalone_rollout_slots(tiny_config(*POOL)) == 0  # sync: no standalone pool


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", *POOL),
         "checkpoint_engine.backend=nccl cannot run on the CPU backend.*ray_object_store"),
        ((), "nnodes=0 x n_gpus_per_node=1: separate_async needs a standalone rollout pool"),
    ],
)  # fmt: skip
def test_separate_async_on_cpu_refuses_a_gpu_engine_or_an_empty_pool_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        launcher.standalone_rollout_slots(tiny_config(*SEPARATE_ASYNC, *overrides))


def test_reading_the_rollout_pool_imports_no_veRL_before_the_platform_is_set():
    """The launcher runs before the CPU platform's environment is set: importing veRL there would
    let its modules compute device names for a platform auto-detected on this machine."""
    script = (
        "import sys\n"
        "from omegaconf import OmegaConf\n"
        "from coba_verl.cpu.launcher import standalone_rollout_slots\n"
        "config = {'trainer': {'use_v1': True, 'v1': {'trainer_mode': 'separate_async'}},\n"
        "          'actor_rollout_ref': {'rollout': {'nnodes': 1, 'n_gpus_per_node': 1,\n"
        "                                            'checkpoint_engine': {'backend': 'naive'}}}}\n"
        "assert standalone_rollout_slots(OmegaConf.create(config)) == 1\n"
        "print(sorted(m for m in ('verl', 'torch', 'ray') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_cpu_run_gets_logical_ray_slots_and_the_registration_module(monkeypatch):
    monkeypatch.setattr(launcher, "_cuda_present", lambda: False)
    import verl.plugin.platform.platform_manager as platform_manager

    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)
    for key in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES"):
        monkeypatch.setenv(key, "")  # restored after the test: prepare_cpu_run sets both
    config = tiny_config("trainer.n_gpus_per_node=8")
    launcher.prepare_cpu_run(config)
    ray_init = config.ray_kwargs.ray_init
    # veRL's resource pool asks 3 CPUs per slot (8 x 3 = 24): the logical CPUs grow with the slots
    assert ray_init.num_gpus == 8 and ray_init.num_cpus == config.coba_cpu.ray_num_cpus + 3 * 7
    assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"
    assert launcher.REGISTRATION_MODULE in os.environ["VERL_USE_EXTERNAL_MODULES"].split(",")
    config = tiny_config("trainer.n_gpus_per_node=8", *SEPARATE_ASYNC, *POOL)
    launcher.prepare_cpu_run(config)
    ray_init = config.ray_kwargs.ray_init
    # separate_async's standalone pool: 2 more slots, of 2 CPUs each (max_colocate_count=2)
    assert ray_init.num_gpus == 8 + 2 and ray_init.num_cpus == config.coba_cpu.ray_num_cpus + 3 * 7 + 2 * 2


@pytest.mark.parametrize(
    ("overrides", "dashboard"), [((), False), (("+ray_kwargs.ray_init.include_dashboard=true",), True)]
)
def test_the_ray_a_cpu_run_starts_has_no_dashboard_unless_asked_for(monkeypatch, overrides, dashboard):
    monkeypatch.setattr(launcher, "_cuda_present", lambda: False)
    import verl.plugin.platform.platform_manager as platform_manager

    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)
    for key in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES"):
        monkeypatch.setenv(key, "")
    config = tiny_config(*overrides)
    launcher.prepare_cpu_run(config)
    assert config.ray_kwargs.ray_init.include_dashboard is dashboard


def test_cpu_run_quiets_transferqueue_threads_engine_warnings_and_idle_ray_workers(monkeypatch):
    monkeypatch.setattr(launcher, "_cuda_present", lambda: False)
    monkeypatch.setattr(launcher, "physical_cores", lambda: 2)
    import verl.plugin.platform.platform_manager as platform_manager

    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)
    for key in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES", "RAY_prestart_worker_first_driver"):
        monkeypatch.setenv(key, "")
    for key in ("TQ_NUM_THREADS", "PYTHONWARNINGS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("RAY_prestart_worker_first_driver")
    config = tiny_config()
    launcher.prepare_cpu_run(config)
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.TQ_NUM_THREADS == "2"  # TransferQueue's 8 > 2 cores logs a warning per put and get
    assert env_vars.PYTHONWARNINGS == launcher.QUIET_WARNINGS
    assert os.environ["RAY_prestart_worker_first_driver"] == "0"


def test_tiny_recipe_starts_one_agent_and_one_reward_worker():
    config = tiny_config()
    assert config.actor_rollout_ref.rollout.agent.num_workers == 1
    assert config.reward.num_workers == 1
    assert config.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1


@pytest.mark.skipif(launcher._cuda_present(), reason="checks a machine without GPUs")
def test_gpu_recipe_without_gpus_stops_at_once_pointing_to_the_cpu_recipe(tmp_path):
    setting = "qwen2.5_0.5b_instruct_1gpu"
    env = {**os.environ, "PYTHON": sys.executable, "DATA_DIR": str(tmp_path), "SETTING": setting}
    done = subprocess.run(
        ["bash", str(REPO / "recipes/gsm8k/run.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "no GPU found" in done.stderr and "recipes/tiny_cpu" in done.stderr
    # at once: before any data is prepared and before Ray starts
    assert not any(tmp_path.iterdir())
    assert "Started a local Ray instance" not in done.stdout + done.stderr


@pytest.mark.parametrize("value", ["0", "-1", "fast", "true"])
def test_cpu_backend_refuses_a_poll_interval_that_is_not_a_positive_number_of_seconds(monkeypatch, value):
    monkeypatch.setattr(launcher, "_cuda_present", lambda: False)
    with pytest.raises(CobaRefusal, match=f"(?i)coba_cpu.poll_interval_s={value}.* > 0, or null"):
        launcher.prepare_cpu_run(tiny_config(f"coba_cpu.poll_interval_s={value}"))
