"""veRL's mandatory values (``???``) a launch leaves unset: which the run reads, the one-line refusal
that names them all before Ray, and the launch lines coba-verl prints, each of which sets them."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.launch.mandatory_values import (
    check_mandatory_values,
    missing_values,
    named_when_read,
    unset_mandatory_values,
)

ROOT = Path(__file__).resolve().parents[2]
ROLLOUT = "actor_rollout_ref.rollout.name"
REWARD_ROLLOUT = "reward.reward_model.rollout.name"
#: The refusal of a launch that sets no rollout engine, word for word.
NO_ENGINE = (
    "the launch leaves 1 mandatory value of veRL's config unset (???) that this run reads: "
    "actor_rollout_ref.rollout.name (the rollout engine: vllm or sglang on GPUs, hf on CPU with coba-verl "
    "train --cpu). veRL would stop on it with omegaconf's MissingMandatoryValue, on GPUs only after Ray has "
    "started. Set each on the launch line, e.g. actor_rollout_ref.rollout.name=vllm."
)


def test_verls_config_leaves_exactly_the_rollout_engines_of_actor_and_reward_model_mandatory(coba_compose):
    assert missing_values(coba_compose([])) == [ROLLOUT, REWARD_ROLLOUT]


def test_the_reward_models_engine_is_read_only_with_the_reward_model_enabled(coba_compose, gpu_1x8):
    assert unset_mandatory_values(coba_compose(gpu_1x8)) == [ROLLOUT]
    assert unset_mandatory_values(coba_compose([*gpu_1x8, f"{ROLLOUT}=vllm"])) == []
    enabled = coba_compose([*gpu_1x8, "reward.reward_model.enable=true"])
    assert unset_mandatory_values(enabled) == [ROLLOUT, REWARD_ROLLOUT]


def test_a_launch_without_a_rollout_engine_is_refused_naming_it_and_what_fits(coba_compose, gpu_1x8):
    with pytest.raises(CobaRefusal) as refused:
        check_mandatory_values(coba_compose(gpu_1x8))
    assert str(refused.value) == NO_ENGINE


def test_every_unset_value_the_run_reads_is_named_in_the_one_refusal(coba_compose, gpu_1x8):
    config = coba_compose([*gpu_1x8, "reward.reward_model.enable=true", "trainer.project_name=???"])
    with pytest.raises(CobaRefusal) as refused:
        check_mandatory_values(config)
    message = str(refused.value)
    assert message.startswith(
        "the launch leaves 3 mandatory values of veRL's config unset (???) that this run reads: "
        f"{ROLLOUT} (the rollout engine: vllm or sglang on GPUs, hf on CPU with coba-verl train --cpu); "
        f"{REWARD_ROLLOUT} (the engine serving the reward model: vllm or sglang); "
        "trainer.project_name (a value veRL's config leaves to the launch line). veRL would stop on the first"
    )
    assert message.endswith(f"e.g. {ROLLOUT}=vllm {REWARD_ROLLOUT}=vllm.") and "\n" not in message


def test_the_cpu_group_sets_the_engine_the_cpu_backend_registers(coba_compose):
    from coba_verl.cpu import ROLLOUT_NAME

    config = coba_compose(["+coba_cpu=cpu"])
    assert config.actor_rollout_ref.rollout.name == ROLLOUT_NAME == "hf"
    assert unset_mandatory_values(config) == []


def test_a_check_that_reads_an_unset_value_refuses_naming_them_all(coba_compose, gpu_1x8):
    config = coba_compose(gpu_1x8)
    with pytest.raises(CobaRefusal) as refused, named_when_read(config):
        _ = config.actor_rollout_ref.rollout.name
    assert str(refused.value) == NO_ENGINE


def test_a_read_of_a_value_the_run_does_not_read_keeps_omegaconfs_error(coba_compose, gpu_1x8):
    from omegaconf.errors import MissingMandatoryValue

    config = coba_compose([*gpu_1x8, f"{ROLLOUT}=vllm"])
    with pytest.raises(MissingMandatoryValue), named_when_read(config):
        _ = config.reward.reward_model.rollout.name


def test_coba_verl_train_help_example_sets_every_mandatory_value(coba_compose):
    from coba_verl.cli import train_usage

    lines = train_usage().split("example:\n", 1)[1].split("\n\n", 1)[0]
    command = shlex.split(lines.replace("\\\n", " ").replace("$HOME", os.path.expanduser("~")))
    assert command[:2] == ["coba-verl", "train"]
    config = coba_compose(command[2:])
    assert config.actor_rollout_ref.rollout.name == "vllm"
    check_mandatory_values(config)


def test_coba_verl_main_without_a_rollout_engine_is_one_line_and_exit_two_before_ray(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "coba_verl.main", "hydra.output_subdir=null", f"hydra.run.dir={tmp_path}",
         "data.train_batch_size=128", "actor_rollout_ref.rollout.n=16",
         "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct", "trainer.n_gpus_per_node=8"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "HYDRA_FULL_ERROR": "1"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == f"coba-verl: {NO_ENGINE}"
    assert "Traceback" not in done.stderr and "Ray instance" not in done.stderr + done.stdout


def test_the_check_reads_the_composed_config_without_resolving_it(coba_compose, gpu_1x8):
    config = coba_compose([*gpu_1x8, f"{ROLLOUT}=vllm", "trainer.project_name=${oc.env:COBA_UNSET_VARIABLE}"])
    check_mandatory_values(config)  # an interpolation that would not resolve is veRL's to meet
    assert OmegaConf.select(config, ROLLOUT) == "vllm"
