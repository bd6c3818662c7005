"""What ``python -m coba_verl.main`` checks before Ray starts, and how its refusals read."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.launch import preflight

ROOT = Path(__file__).resolve().parents[1]


def rows(n: int, *, index: bool = True) -> pd.DataFrame:
    extra = [{"index": i, "split": "train"} if index else {"split": "train"} for i in range(n)]
    return pd.DataFrame(
        {
            "data_source": ["coba_arithmetic"] * n,
            "prompt": [[{"role": "user", "content": f"{i}+1="}] for i in range(n)],
            "reward_model": [{"style": "rule", "ground_truth": str(i + 1)} for i in range(n)],
            "extra_info": extra,
        }
    )


def config(tmp_path: Path, *, model: str | None = None, tiny: bool = True, **trainer) -> OmegaConf:
    model_dir = tmp_path / "model"
    if model is None:
        model_dir.mkdir(exist_ok=True)
        (model_dir / "config.json").write_text("{}")
    for name in ("train", "test"):
        if not (tmp_path / f"{name}.parquet").exists():
            rows(4).to_parquet(tmp_path / f"{name}.parquet")
    return OmegaConf.create(
        {
            "data": {
                "train_files": str(tmp_path / "train.parquet"),
                "val_files": [str(tmp_path / "test.parquet")],
            },
            "actor_rollout_ref": {"model": {"path": model or str(model_dir)}},
            "reward": {"custom_reward_function": {"path": preflight.TINY_REWARD_PATH if tiny else None}},
            "trainer": {
                "experiment_name": "exp",
                "default_local_dir": None,
                "resume_mode": "auto",
                "resume_from_path": None,
                **trainer,
            },
        }
    )


def test_missing_tiny_data_names_the_command_that_writes_it(tmp_path):
    cfg = config(tmp_path)
    (tmp_path / "train.parquet").unlink()
    with pytest.raises(CobaRefusal, match="data.train_files=.* does not exist") as refused:
        preflight.check_inputs(cfg)
    assert f"python -m coba_verl.arithmetic.tiny --output-dir {tmp_path}" in str(refused.value)


def test_missing_data_of_another_recipe_names_the_path(tmp_path):
    cfg = config(tmp_path, tiny=False)
    (tmp_path / "test.parquet").unlink()
    with pytest.raises(CobaRefusal, match=f"data.val_files={tmp_path / 'test.parquet'} does not exist"):
        preflight.check_inputs(cfg)


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2.5-7B-Instruct", "gpt2"])
def test_hub_ids_are_never_blocked(tmp_path, hub_id):
    preflight.check_inputs(config(tmp_path, model=hub_id))


@pytest.mark.parametrize("local", ["/nonexistent/model", "./no/model", "~/no-such-coba-model", "a/b/model"])
def test_missing_local_model_is_refused(tmp_path, local):
    with pytest.raises(CobaRefusal, match=f"actor_rollout_ref.model.path={local} does not exist"):
        preflight.check_inputs(config(tmp_path, model=local))


def test_training_row_without_extra_info_index_is_named_missing(tmp_path):
    frame = rows(5)
    frame.at[3, "extra_info"] = {"split": "train"}
    frame.to_parquet(tmp_path / "train.parquet")
    with pytest.raises(CobaRefusal, match=r"train.parquet row 3: extra_info.index is missing"):
        preflight.check_inputs(config(tmp_path))
    rows(5, index=False).to_parquet(tmp_path / "train.parquet")  # no index field at all
    with pytest.raises(CobaRefusal, match=r"row 0: extra_info.index is missing"):
        preflight.check_inputs(config(tmp_path))


def test_validation_rows_are_checked_for_their_columns_but_not_for_an_index(tmp_path):
    cfg = config(tmp_path)
    rows(3, index=False).to_parquet(tmp_path / "test.parquet")  # evaluation rows never reach the tracker
    preflight.check_inputs(cfg)
    rows(3).drop(columns=["reward_model"]).to_parquet(tmp_path / "test.parquet")
    missing = r"data.val_files: \S*test.parquet: missing columns \['reward_model'\]"
    with pytest.raises(CobaRefusal, match=missing):
        preflight.check_inputs(cfg)


def test_the_data_check_reads_the_prompt_column_veRL_is_told_to_read(tmp_path):
    cfg = config(tmp_path)
    for name in ("train", "test"):
        rows(4).rename(columns={"prompt": "question"}).to_parquet(tmp_path / f"{name}.parquet")
    with pytest.raises(CobaRefusal, match=r"missing columns \['prompt'\]"):
        preflight.check_inputs(cfg)
    OmegaConf.update(cfg, "data.prompt_key", "question")
    preflight.check_inputs(cfg)


def test_null_checkpoint_folder_goes_next_to_the_training_file_per_experiment(tmp_path):
    cfg = config(tmp_path)
    preflight.place_checkpoints(cfg)
    assert cfg.trainer.default_local_dir == str(tmp_path.resolve() / "checkpoints" / "exp")
    cfg.trainer.default_local_dir = "/elsewhere"
    preflight.place_checkpoints(cfg)
    assert cfg.trainer.default_local_dir == "/elsewhere"  # an explicit folder is kept


def test_resume_is_announced_at_warning_with_step_and_folder(tmp_path, caplog):
    cfg = config(tmp_path, default_local_dir=str(tmp_path / "ckpt"))
    with caplog.at_level(logging.WARNING, logger="coba_verl.verl_plugin.launch.preflight"):
        preflight.warn_resume(cfg)
    assert not caplog.records  # nothing to resume
    (tmp_path / "ckpt" / "global_step_16").mkdir(parents=True)
    (tmp_path / "ckpt" / preflight.TRACKER_FILE).write_text("16")
    with caplog.at_level(logging.WARNING, logger="coba_verl.verl_plugin.launch.preflight"):
        preflight.warn_resume(cfg)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "step 16" in record.message and str(tmp_path / "ckpt" / "global_step_16") in record.message
    assert "trainer.resume_mode=disable" in record.message
    caplog.clear()
    cfg.trainer.resume_mode = "disable"
    preflight.warn_resume(cfg)
    assert not caplog.records


def run_main(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "coba_verl.main", "--config-path", str(ROOT / "recipes/tiny_cpu/config"),
         "--config-name", "tiny", "hydra.output_subdir=null", f"hydra.run.dir={tmp_path}", *overrides],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_refusal_prints_one_line_and_exits_two_before_ray(tmp_path):
    done = run_main(tmp_path, "coba.strategy=bogus", env={"HYDRA_FULL_ERROR": "1"})
    assert done.returncode == 2
    assert "coba-verl: coba.strategy='bogus' is unknown" in done.stderr
    assert "Traceback" not in done.stderr and "Ray instance" not in done.stderr + done.stdout
    assert len(done.stderr.splitlines()) <= 5  # the message, after at most veRL's platform warnings


def refusal_line(done: subprocess.CompletedProcess) -> str:
    """The one ``coba-verl:`` line of a refused launch, after checking that it was refused before Ray."""
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("coba-verl:")]
    assert len(lines) == 1 and done.stderr.splitlines()[-1] == lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Ray instance" not in done.stderr + done.stdout
    return lines[0]


def launch_with_data(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None):
    """The tiny recipe on ``tmp_path``'s train.parquet, test.parquet and model folder."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")
    for name in ("train", "test"):
        if not (tmp_path / f"{name}.parquet").exists():
            rows(4).to_parquet(tmp_path / f"{name}.parquet")
    return run_main(
        tmp_path,
        f"data.train_files={tmp_path / 'train.parquet'}",
        f"data.val_files={tmp_path / 'test.parquet'}",
        f"actor_rollout_ref.model.path={tmp_path / 'model'}",
        *overrides,
        env=env,
    )


def test_a_coba_value_of_the_wrong_type_is_one_line_and_exit_two(tmp_path):
    line = refusal_line(run_main(tmp_path, "coba.min_rollouts=abc", env={"HYDRA_FULL_ERROR": "1"}))
    assert line == "coba-verl: coba.min_rollouts='abc' (str) must be an integer."


def _duplicate_index(path: Path) -> None:
    frame = rows(4)
    frame.at[3, "extra_info"] = {"index": 1, "split": "train"}
    frame.to_parquet(path)


def _without_prompt(path: Path) -> None:
    rows(4).drop(columns=["prompt"]).to_parquet(path)


#: case -> (the file written badly, how, the refusal it gets)
BAD_DATA = {
    "train-without-prompt": (
        "train", _without_prompt, r"data.train_files: \S*train.parquet: missing columns \['prompt'\]"
    ),
    "train-not-parquet": (
        "train", lambda path: path.write_text("not parquet"), r"train.parquet: cannot be read as parquet"
    ),
    "train-empty": ("train", lambda path: rows(0).to_parquet(path), r"\S*train.parquet: has no rows"),
    "train-repeated-index": (
        "train", _duplicate_index, r"train.parquet row 3: extra_info.index=1 repeats \S*train.parquet row 1\."
    ),
    "val-without-prompt": (
        "test", _without_prompt, r"data.val_files: \S*test.parquet: missing columns \['prompt'\]"
    ),
    "val-empty-file": (
        "test", lambda path: path.write_bytes(b""), r"data.val_files: \S*test.parquet: cannot be read"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_DATA)
def test_a_data_file_the_data_check_faults_is_refused_in_one_line_before_ray(tmp_path, case):
    file, write, message = BAD_DATA[case]
    write(tmp_path / f"{file}.parquet")
    line = refusal_line(launch_with_data(tmp_path))
    assert re.search(message, line), line
    assert "python -m coba_verl.data check" in line


def test_an_async_trainer_veRL_would_stop_inside_ray_is_refused_in_one_line_before_ray(tmp_path):
    """The tiny recipe under separate_async as it stands: veRL's default of 4 local updates does not
    fit 16 prompts in mini-batches of 8, and veRL's default rollout pool is empty."""
    line = refusal_line(launch_with_data(tmp_path, "trainer.v1.trainer_mode=separate_async"))
    assert line.startswith("coba-verl: trainer.v1.trainer_mode=separate_async cannot start with this config")
    fix = "trainer.v1.separate_async.parameter_sync_step=2 actor_rollout_ref.rollout.nnodes=1"
    assert line.endswith(f"To launch it, set: {fix}.")


def test_notes_are_said_once_a_launch_and_a_plugin_refusal_is_one_line(tmp_path):
    """The driver checks the config twice (before and after veRL's device setup); the second check,
    like the trainer's inside Ray, says nothing again. The plugin check comes last, still before Ray."""
    done = launch_with_data(tmp_path, "coba.strategy=uniform", "coba.window=5",
                            env={"VERL_USE_EXTERNAL_PLUGINS": "none"})  # fmt: skip
    line = refusal_line(done)
    assert "VERL_USE_EXTERNAL_PLUGINS=none keeps veRL from loading the 'coba_verl' entry point" in line
    output = done.stdout + done.stderr
    assert output.count("coba.window=5 does not change the budgets of strategy='uniform'") == 1
    assert output.count("coba.group_weight='equal' with actor_rollout_ref.actor.loss_agg_mode") == 1


def test_the_trainers_check_of_a_config_the_driver_passed_says_nothing_again(caplog):
    """The trainer's own check stays a check (the stock main_ppo route has no other), but on a
    config the driver has checked it neither warns nor logs again."""
    from coba_verl.verl_plugin.launch.config_bridge import CHECKED_KEY, check_config

    cfg = OmegaConf.create(
        {
            "coba": {"strategy": "uniform", "window": 5},
            "trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"}},
            "algorithm": {"adv_estimator": "grpo"},
            "data": {"train_batch_size": 4},
            "actor_rollout_ref": {"rollout": {"n": 4}, "actor": {"loss_agg_mode": "token-mean"}},
        }
    )
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="coba.window=5 does not change"):
        check_config(cfg)
    assert any("loss_agg_mode='token-mean'" in r.getMessage() for r in caplog.records)
    assert cfg[CHECKED_KEY] is True
    caplog.clear()
    with caplog.at_level(logging.INFO), warnings.catch_warnings():
        warnings.simplefilter("error")
        check_config(cfg)
    assert not caplog.records
    cfg.algorithm.adv_estimator = "gae"
    with pytest.raises(ValueError, match="algorithm.adv_estimator=gae is not supported"):
        check_config(cfg)  # still refuses


def test_tiny_recipe_without_data_names_the_prepare_command(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "recipes/tiny_cpu/run.sh")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "DATA_DIR": str(tmp_path), "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"python -m coba_verl.arithmetic.tiny --output-dir {tmp_path / 'tiny_cpu'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_fsdp_run_is_refused_where_a_trl_without_the_ppo_value_head_is_importable(monkeypatch, tmp_path):
    fake = tmp_path / "trl"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '1.16.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "trl", raising=False)
    fsdp_run = OmegaConf.create({"actor_rollout_ref": {"actor": {"strategy": "fsdp2"}}})
    with pytest.raises(CobaRefusal, match="TRL 1.16.0 is installed.*AutoModelForCausalLMWithValueHead"):
        preflight.check_trl_conflict(fsdp_run)
    monkeypatch.delitem(sys.modules, "trl", raising=False)


def test_a_missing_prior_file_is_refused_before_ray_starts(tmp_path):
    cfg = config(tmp_path)
    OmegaConf.update(cfg, "coba.prior_file", str(tmp_path / "priors.jsonl"), force_add=True)
    with pytest.raises(CobaRefusal, match=r"coba.prior_file=.*priors.jsonl' does not exist"):
        preflight.check_inputs(cfg)
    (tmp_path / "priors.jsonl").write_text('{"index": 0, "pass_rate": 0.5}\n')
    preflight.check_inputs(cfg)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"index": 0, "pass_rate": 0.5}\nnot json\n', r" line 2 is not JSON"),
        ('{"index": 3, "pass_rate": 1.5}\n', r": the prior pass rate of index 3 is 1.5; a pass rate lies in"),
        ('{"index": 1, "successes": 5, "attempts": 4}\n', r": the prior of index 1 is successes=5, attempts"),
        (
            '{"index": 1, "pass_rate": 0.5}\n{"index": 1.0, "pass_rate": 0.2}\n',
            r": index 1.0 has more than one prior",
        ),
    ],
)
def test_a_prior_file_the_trainer_would_refuse_is_refused_before_ray_starts(tmp_path, content, message):
    """The pre-flight reads the file with the trainer's reader (`read_prior_file`), so a bad record
    is one line before Ray starts, not an error inside a Ray worker."""
    (tmp_path / "priors.jsonl").write_text(content)
    cfg = config(tmp_path)
    OmegaConf.update(cfg, "coba.prior_file", str(tmp_path / "priors.jsonl"), force_add=True)
    with pytest.raises(CobaRefusal, match=r"coba.prior_file: file \S*priors.jsonl" + message):
        preflight.check_inputs(cfg)


def test_an_error_of_verls_own_checks_keeps_its_traceback_and_exit_status(tmp_path):
    """Not a refusal of ours (veRL's validate_config raises a plain ValueError): Hydra's report of it,
    with the traceback, and exit status 1, never a ``coba-verl:`` line."""
    done = launch_with_data(
        tmp_path, "actor_rollout_ref.rollout.log_prob_micro_batch_size=4", env={"HYDRA_FULL_ERROR": "1"}
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback (most recent call last)" in done.stderr
    assert "You have set both 'actor_rollout_ref.rollout.log_prob_micro_batch_size'" in done.stderr
    assert "coba-verl:" not in done.stderr


# ---------------------------------------------------------------- GPU runs: where ray.init() goes


def gpu_run(**ray_init: str) -> OmegaConf:
    """A GPU recipe's settings as check_accelerator reads them."""
    return OmegaConf.create(
        {
            "trainer": {"n_gpus_per_node": 8, "nnodes": 2},
            "actor_rollout_ref": {"rollout": {"name": "vllm"}},
            "ray_kwargs": {"ray_init": {"num_cpus": None, **ray_init}},
        }
    )


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    """This machine as a head node without GPUs: torch sees none, no RAY_ADDRESS, and Ray's default
    temp dir (where ``ray start`` leaves the cluster's address) is an empty folder of the test's."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))


def test_a_gpu_run_that_would_start_a_fresh_ray_without_gpus_is_refused(no_gpu, monkeypatch):
    with pytest.raises(CobaRefusal, match="no cluster started on this machine with ray start"):
        preflight.check_accelerator(gpu_run())
    monkeypatch.setenv("RAY_ADDRESS", "local")  # Ray's word for a fresh local Ray
    with pytest.raises(
        CobaRefusal, match="RAY_ADDRESS=local starts a fresh Ray here.*ray start on every node"
    ):
        preflight.check_accelerator(gpu_run())


@pytest.mark.parametrize(
    ("env", "ray_init"),
    [({"RAY_ADDRESS": "10.0.0.1:6379"}, {}), ({}, {"address": "10.0.0.1:6379"}),
     ({"RAY_ADDRESS": "local"}, {"address": "10.0.0.1:6379"}), ({"RAY_ADDRESS": "ray://10.0.0.1:10001"}, {})],
    ids=["RAY_ADDRESS", "ray_init.address", "ray_init.address-over-RAY_ADDRESS", "ray-client"],
)  # fmt: skip
def test_a_gpu_run_that_names_a_ray_cluster_is_left_to_veRL(no_gpu, monkeypatch, env, ray_init):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    preflight.check_accelerator(gpu_run(**ray_init))


def test_where_ray_would_start_is_refused_not_guessed_when_rays_rule_is_gone(no_gpu, monkeypatch):
    """Without an address only Ray's private ``canonicalize_bootstrap_address`` knows whether
    ``ray.init()`` attaches to a cluster ``ray start`` recorded: a Ray without it is refused in one
    line naming what to set; an explicit address needs no rule, and a machine with a GPU no check."""
    import torch
    from ray._private import services

    monkeypatch.delattr(services, "canonicalize_bootstrap_address")
    with pytest.raises(CobaRefusal, match=r"^cannot tell whether ray.init\(\) starts a fresh Ray") as refused:
        preflight.check_accelerator(gpu_run())
    assert "+ray_kwargs.ray_init.address" in str(refused.value) and "\n" not in str(refused.value)
    preflight.check_accelerator(gpu_run(address="10.0.0.1:6379"))  # a cluster's: left to veRL
    with pytest.raises(CobaRefusal, match="no GPU found"):
        preflight.check_accelerator(gpu_run(address="local"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    preflight.check_accelerator(gpu_run())  # GPUs here: where Ray starts does not matter


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def own_processes(root: Path, client_port: int) -> list:
    """The processes of the Ray head started under ``root``: those whose command line names it (GCS,
    raylet, monitors), its Ray client server (named by its own port) and all their children (the
    raylet's agents, whose command lines are process titles)."""
    import psutil

    found = {}
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or ())
        client = "ray.util.client.server" in line and f"--port={client_port}" in line.split()
        if str(root) in line or client:
            found[process.pid] = process
    for process in list(found.values()):
        try:
            found.update((child.pid, child) for child in process.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return list(found.values())


@pytest.fixture
def ray_head(monkeypatch):
    """A real ``ray start --head`` with one (logical) GPU, its temp dir and ports its own, so that no
    other Ray of this machine attaches to it (they read /tmp/ray, or RAY_ADDRESS=local); stopped by
    ending its own processes (those whose command line names its temp dir), never ``ray stop``."""
    import tempfile

    import psutil

    root = Path(tempfile.mkdtemp(prefix="coba-head-", dir="/tmp"))  # short: Ray's socket paths are limited
    temp_dir = root / "ray"
    ports = {
        "--port": free_port(), "--ray-client-server-port": free_port(),
        "--dashboard-agent-listen-port": free_port(), "--dashboard-agent-grpc-port": free_port(),
        "--runtime-env-agent-port": free_port(), "--metrics-export-port": free_port(),
    }  # fmt: skip
    ray = str(Path(sys.executable).with_name("ray"))
    command = [ray, "start", "--head", "--num-cpus", "1", "--num-gpus", "1", "--temp-dir", str(temp_dir),
               "--include-dashboard", "false", "--disable-usage-stats"]  # fmt: skip
    command += [f"{flag}={port}" for flag, port in ports.items()]
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}

    def stop() -> None:
        own = own_processes(root, ports["--ray-client-server-port"])
        for process in own:
            process.terminate()
        _, alive = psutil.wait_procs(own, timeout=5)
        for process in alive:  # Ray's agents outlive a SIGTERM
            process.kill()
        psutil.wait_procs(alive, timeout=15)

    try:
        for _ in range(2):  # ray start gives its raylet 30 s to register, which a loaded machine can miss
            started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
            if started.returncode == 0:
                break
            stop()
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        yield root, ports["--port"]
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_head_node_without_gpus_attaches_to_the_ray_cluster_started_on_it(ray_head, monkeypatch):
    """docs/recipes.md's launch: ``ray start`` on every node, then the launcher on the head, with no
    address: ray.init() attaches to the cluster ``ray start`` left its address for, as Ray itself
    shows in a fresh process (the cluster's one GPU), so the run is not refused."""
    import torch

    root, port = ray_head
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("RAY_TMPDIR", str(root))  # Ray's default temp dir: <RAY_TMPDIR>/ray
    assert not preflight.ray_starts_fresh(gpu_run())
    preflight.check_accelerator(gpu_run())
    code = "import ray; ray.init(); print('GPU', ray.cluster_resources().get('GPU')); ray.shutdown()"
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": str(root)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert "GPU 1.0" in done.stdout.splitlines(), done.stderr[-2000:]
    assert f":{port}" in (root / "ray" / "ray_current_cluster").read_text()
    monkeypatch.setenv("RAY_ADDRESS", "local")  # the same machine, told to start a fresh Ray
    with pytest.raises(CobaRefusal, match="RAY_ADDRESS=local starts a fresh Ray here"):
        preflight.check_accelerator(gpu_run())
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setenv("RAY_TMPDIR", str(root / "elsewhere"))  # another temp dir: no cluster there ...
    with pytest.raises(CobaRefusal, match="no cluster started on this machine"):
        preflight.check_accelerator(gpu_run())
    preflight.check_accelerator(gpu_run(_temp_dir=str(root / "ray")))  # ... unless ray.init is told it
