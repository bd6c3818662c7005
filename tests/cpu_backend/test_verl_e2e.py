"""veRL's real trainer end to end on CPU: ``python -m coba_verl.main`` with the tiny recipe.

Everything is veRL's own code path — hydra config, ``validate_config``, ``run_ppo``, the
``TaskRunnerV1`` Ray actor, the FSDP2 actor worker with ``ppo_loss``, the agent loop and router,
the reward loop, TransferQueue, GRPO, the naive checkpoint engine, ``data.pt`` checkpoints —
except the inference engine, which is coba-verl's ``hf`` rollout. The model is the tiny recipe's
warm-started Qwen2 on 32 generated arithmetic prompts, 16 a step (2 steps an epoch, so steps 3
and 4 allocate from history).

Three runs (about 5 minutes on 2 cores): coba for 4 steps with a checkpoint at step 2, a resume
of it from that checkpoint, and uniform for 2 steps. Run alone with ``pytest -m e2e``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
M, N = 16, 4  # data.train_batch_size, rollout.n of the tiny recipe
ALLOCATION_METRICS = (
    "budget_std", "budget_min", "budget_max", "expected_zero_var_share", "alpha", "beta", "tau",
)  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny recipe's data and model, with a short warm start (a few pass rates above zero)."""
    from coba_verl.cpu.tiny import prepare

    return prepare(
        tmp_path_factory.mktemp("tiny"), n_train=32, n_test=16, warm_target=0.25, warm_max_steps=800
    )


def train(tiny: Path, out: Path, *overrides: str) -> list[dict]:
    """Run ``python -m coba_verl.main`` on the tiny recipe; return the step metrics veRL logged."""
    log = out / "metrics.jsonl"
    command = [
        sys.executable, "-m", "coba_verl.main",
        "--config-path", str(REPO / "recipes/tiny_cpu/config"), "--config-name", "tiny",
        f"data.train_files={tiny / 'train.parquet'}", f"data.val_files={tiny / 'test.parquet'}",
        f"actor_rollout_ref.model.path={tiny / 'model'}",
        f"trainer.default_local_dir={out / 'ckpt'}",
        "trainer.logger=[console,file]", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "coba_cpu.allow_with_cuda=true",  # the same CPU run on a machine that also has a GPU
        *overrides,
    ]  # fmt: skip
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(log), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=out)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [{**row["data"], "step": row["step"]} for row in rows if "coba/rollouts" in row["data"]]


@pytest.fixture(scope="module")
def coba_run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("coba")
    steps = train(tiny, out, "coba.strategy=coba", "trainer.total_training_steps=4", "trainer.save_freq=2")
    return out, steps


def test_every_step_spends_m_times_n_rollouts_on_m_prompts(coba_run):
    _, steps = coba_run
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for s in steps:
        # CobaTrainer raises when a prompt's finished sessions differ from its B_i, so a finished
        # run means every prompt got exactly its budget; these count what reached the tracker.
        assert s["coba/prompts"] == M and s["coba/rollouts"] == M * N
        assert s["coba/budget_mean"] == N


def test_budgets_are_uniform_in_epoch_one_and_differ_once_history_exists(coba_run):
    _, steps = coba_run
    assert [s.get("coba/cold_start", 0) for s in steps] == [1, 1, 0, 0]  # logged only when 1
    assert steps[0]["coba/budget_std"] == 0 and steps[1]["coba/budget_std"] == 0
    assert steps[2]["coba/budget_std"] > 0 and steps[3]["coba/budget_std"] > 0


def test_actor_weights_change_and_the_rollout_serves_them(coba_run, tiny):
    out, steps = coba_run
    for s in steps:
        assert s["actor/grad_norm"] > 0
        # Rollout log-probs (hf server) against the actor's recomputation on the same tokens: the
        # server must hold the weights of the previous update, or this grows with every step.
        assert s["training/rollout_probs_diff_mean"] < 1e-5, s["training/rollout_probs_diff_mean"]
        assert s["training/rollout_actor_probs_pearson_corr"] > 0.999
    initial = load_file(tiny / "model" / "model.safetensors")
    shards = sorted((out / "ckpt" / "global_step_4" / "actor").glob("model_world_size_*_rank_0.pt"))
    assert shards, sorted(p.name for p in (out / "ckpt" / "global_step_4" / "actor").iterdir())
    trained = torch.load(shards[0], map_location="cpu", weights_only=False)
    name = "model.layers.0.mlp.down_proj.weight"
    after = trained[name].full_tensor() if hasattr(trained[name], "full_tensor") else trained[name]
    assert not torch.allclose(after.float(), initial[name].float())


def test_checkpoint_holds_the_allocator(coba_run):
    out, _ = coba_run
    from coba_verl.verl_plugin.dataloader import STATE_KEY

    data = torch.load(out / "ckpt" / "global_step_2" / "data.pt", weights_only=False)
    assert STATE_KEY in data, list(data)


def test_resume_from_a_checkpoint_reproduces_the_allocations(coba_run, tiny, tmp_path):
    """Resume from step 2 of the coba run: steps 3 and 4 allocate as in the uninterrupted run.

    Step 3's allocation depends only on the restored tracker; step 4's also on step 3's rollouts,
    which the hf server samples reproducibly (seeded per prompt and weight version)."""
    out, steps = coba_run
    resumed = train(
        tiny, tmp_path, "coba.strategy=coba", "trainer.total_training_steps=4", "trainer.save_freq=-1",
        "trainer.resume_mode=resume_path", f"trainer.resume_from_path={out / 'ckpt' / 'global_step_2'}",
    )  # fmt: skip
    assert [s["step"] for s in resumed] == [3, 4]
    for before, after in zip(steps[2:], resumed, strict=True):
        for key in ALLOCATION_METRICS:
            name = f"coba/{key}"
            assert np.isclose(before.get(name, np.nan), after.get(name, np.nan), equal_nan=True), (
                before["step"], name,
            )
        histogram = {k: v for k, v in before.items() if k.startswith("coba/budget_hist/")}
        assert histogram == {k: v for k, v in after.items() if k.startswith("coba/budget_hist/")}


def test_uniform_gives_every_prompt_rollout_n(tiny, tmp_path):
    steps = train(
        tiny, tmp_path, "coba.strategy=uniform", "trainer.total_training_steps=3", "trainer.save_freq=-1"
    )
    assert [s["step"] for s in steps] == [1, 2, 3]  # step 3 is in epoch 2, where coba would differ
    for s in steps:
        assert s["coba/budget_min"] == s["coba/budget_max"] == N and s["coba/budget_std"] == 0
