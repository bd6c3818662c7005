"""veRL's real trainers end to end on CPU: ``python -m coba_verl.main`` with the tiny recipe.

Everything is veRL's own code path — hydra config, ``validate_config``, ``run_ppo``, the
TaskRunner Ray actor (``TaskRunnerV1`` or the classic ``TaskRunner``), the FSDP2 actor worker with
``ppo_loss``, the agent loop and router, the reward loop, TransferQueue (V1), GRPO, the naive
checkpoint engine, ``data.pt`` checkpoints — except the inference engine, which is coba-verl's
``hf`` rollout. The model is the tiny recipe's warm-started Qwen2 on 32 generated arithmetic
prompts, 16 a step (2 steps an epoch, so steps 3 and 4 allocate from history).

Runs of about 2 minutes each on 2 cores, mostly start-up (the data and model are prepared once,
in about a minute). Alone with ``python -m pytest -m e2e``; the default ``python -m pytest`` (and
CI) leaves out the ones also marked ``e2e_extended``:

* for each trainer, V1 sync (``trainer.use_v1=true``) and classic (``trainer.use_v1=false``):
  coba for 4 steps with a checkpoint every step; a resume (V1 from step 2, an epoch boundary;
  classic from step 1, see `RESUME_FROM`) is ``e2e_extended``: CI resumes V1 from a run killed
  mid-step (below), and colocate_async with prompts in flight through veRL's ``fit()``
  (``tests/verl_plugin/test_verl_trainer_loop.py``);
* V1 with DAPO dynamic sampling (``algorithm.filter_groups.enable=true``) for 3 steps;
* V1 ``colocate_async`` (the ``hf`` server's partial rollout) for 4 steps; ``separate_async`` (a
  standalone ``hf`` server fed by the object-store checkpoint engine) for 4 steps and its resume
  from step 2 are ``e2e_extended`` (CI runs ``separate_async`` through veRL's ``fit()`` in
  ``tests/verl_plugin/test_verl_trainer_loop.py`` and the engine in ``test_object_store_engine.py``);
* ``e2e_extended``: classic, ``coba.strategy=uniform`` against veRL's unmodified
  ``RayPPOTrainer`` (``stock_classic_main.py``) for 2 steps (V1's uniform-equals-stock check
  runs through veRL's ``fit()`` in ``tests/verl_plugin/test_verl_trainer_loop.py``); V1 with
  ``coba.group_weight=equal`` for 3 steps, the advantages veRL trains against the dump's groups.

Budgets are read back from veRL's own rollout dump (``trainer.rollout_data_dir``): the number
of trained trajectories of each prompt in a step is its B_i.

The ``hf`` server gives the B_i identical requests of a prompt B_i distinct, reproducible samples,
but which session gets which sample follows the order in which requests arrive, which Ray does
not fix. The per-step set of trajectories is therefore reproducible, their order in the batch is
not; checks compare sets, and the stock comparison trains on one mini-batch a step, so that the
update does not depend on the order either.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

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
CLASSIC = "trainer.use_v1=false"
#: Checkpoint each trainer is resumed from. veRL's classic fit() does not restore the data order
#: at an epoch boundary (it skips data.pt there, ray_trainer.py:1104-1112, and the resumed epoch
#: replays the first epoch's order, as with stock veRL); coba-verl restores the allocator there
#: anyway, but the prompts of step 3 would differ. So the classic resume starts mid-epoch.
RESUME_FROM = {"v1": 2, "classic": 1}
DAPO = ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny recipe's data and model on its two easy levels, whose short warm start (about a
    minute) leaves pass rates spread between 0 and 1: groups with and without a reward spread.

    Prepared once a test session: under pytest-xdist in the session's folder, which its workers
    share, behind a file lock (this module and ``tests/cluster`` may run on two workers at once);
    `prepare` redoes nothing where the folder already holds what these arguments describe."""
    from filelock import FileLock

    from coba_verl.arithmetic.tiny import prepare

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-of-<user>/pytest-<N>: the session's, above each worker's own
    with FileLock(str(base / "tiny-e2e.lock")):
        return prepare(
            base / "tiny-e2e", n_train=32, n_test=16, warm_target=0.25, warm_max_steps=600,
            levels=["2+1", "2-1"],
        )  # fmt: skip


def tiny_command(tiny: Path, out: Path, *overrides: str, script=("-m", "coba_verl.main"), ckpt=None) -> list:
    """``python -m coba_verl.main`` (or ``script``) on the tiny recipe, writing under ``out``
    (checkpoints under ``ckpt``, default ``out / "ckpt"``)."""
    return [
        sys.executable, *script,
        "--config-path", str(REPO / "recipes/tiny_cpu/config"), "--config-name", "tiny",
        f"data.train_files={tiny / 'train.parquet'}", f"data.val_files={tiny / 'test.parquet'}",
        f"actor_rollout_ref.model.path={tiny / 'model'}",
        f"trainer.default_local_dir={ckpt or out / 'ckpt'}",
        "trainer.logger=[console,file]", "trainer.val_before_train=false", "trainer.test_freq=-1",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        "coba_cpu.allow_with_cuda=true",  # the same CPU run on a machine that also has a GPU
        *overrides,
    ]  # fmt: skip


def tiny_env(out: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    log = str(out / "metrics.jsonl")
    return {**os.environ, "VERL_FILE_LOGGER_PATH": log, "TOKENIZERS_PARALLELISM": "false", **(env or {})}


def step_metrics(out: Path) -> list[dict]:
    """veRL's step metrics of the run that wrote under ``out``."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{**row["data"], "step": row["step"]} for row in rows if "timing_s/step" in row["data"]]


def train(
    tiny: Path,
    out: Path,
    *overrides: str,
    script: tuple[str, ...] = ("-m", "coba_verl.main"),
    env: dict[str, str] | None = None,
    ckpt: Path | None = None,
) -> list:
    """Run ``python -m coba_verl.main`` (or ``script``) on the tiny recipe; return veRL's step metrics."""
    command = tiny_command(tiny, out, *overrides, script=script, ckpt=ckpt)
    env = tiny_env(out, env)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=out)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    return step_metrics(out)


def trained(out: Path, step: int) -> list[dict]:
    """veRL's dump of the trajectories trained at ``step``: input, output, gts, score."""
    return [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]


def budgets(out: Path, step: int) -> Counter:
    """(prompt text, answer) -> trajectories trained at ``step``: B_i of each prompt (a step
    without DAPO trains M distinct prompts)."""
    return Counter((row["input"], row["gts"]) for row in trained(out, step))


def trained_groups(out: Path, step: int) -> dict[str, list[dict]]:
    """uid -> the group's trained trajectories at ``step`` (V1 dump: ``uid`` is the sample key
    ``<uid>_<session>_<output>``), without veRL's padding rows (``pad<hex>`` uids, no prompt)
    that V1 adds to a batch of groups of mixed sizes."""
    groups: dict[str, list[dict]] = {}
    for row in trained(out, step):
        uid = row["uid"].rsplit("_", 2)[0]
        if not uid.startswith("pad"):
            groups.setdefault(uid, []).append(row)
    return groups


@pytest.fixture(scope="module", params=["v1", "classic"])
def coba_run(request, tiny, tmp_path_factory):
    """coba for 4 steps, checkpoint at step 2, in veRL's V1 sync trainer or its classic trainer."""
    out = tmp_path_factory.mktemp(f"coba-{request.param}")
    trainer = (CLASSIC,) if request.param == "classic" else ()
    steps = train(tiny, out, "trainer.total_training_steps=4", "trainer.save_freq=1", *trainer)
    return SimpleNamespace(out=out, steps=steps, trainer=trainer, resume_from=RESUME_FROM[request.param])


def test_every_step_spends_m_times_n_rollouts_on_m_prompts(coba_run):
    steps = coba_run.steps
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for s in steps:
        # A prompt with more sessions than its B_i stops the run; these count what reached the
        # tracker, and veRL's own dump what was trained. The classic trainer has no failed
        # sessions to count (a failing one stops the step), so it logs no failed_rollouts.
        assert s["coba/prompts"] == M and s["coba/rollouts"] == M * N
        if coba_run.trainer:
            assert "coba/failed_rollouts" not in s
        else:
            assert s["coba/failed_rollouts"] == 0
        assert s["coba/budget_mean"] == N
        trained_budgets = budgets(coba_run.out, s["step"])
        assert len(trained_budgets) == M and sum(trained_budgets.values()) == M * N


def test_budgets_are_uniform_in_epoch_one_and_differ_once_history_exists(coba_run):
    steps = coba_run.steps
    assert [s.get("coba/cold_start", 0) for s in steps] == [1, 1, 0, 0]  # logged only when 1
    assert steps[0]["coba/budget_std"] == 0 and steps[1]["coba/budget_std"] == 0
    assert steps[2]["coba/budget_std"] > 0 and steps[3]["coba/budget_std"] > 0
    for s in steps:  # what veRL trained is what was allocated: min, max and spread of B_i
        trained_budgets = np.array(list(budgets(coba_run.out, s["step"]).values()))
        assert trained_budgets.min() == s["coba/budget_min"] and trained_budgets.max() == s["coba/budget_max"]
        assert np.isclose(trained_budgets.std(), s["coba/budget_std"])


def test_prompt_mean_score_is_veRLs_mean_score_under_equal_budgets_and_weighs_prompts_once(coba_run):
    for s in coba_run.steps:
        by_prompt: dict = {}
        for row in trained(coba_run.out, s["step"]):
            by_prompt.setdefault((row["input"], row["gts"]), []).append(row["score"])
        assert s["coba/prompt_mean_score"] == pytest.approx(np.mean([np.mean(v) for v in by_prompt.values()]))
        if s["coba/budget_std"] == 0:  # epoch 1: every prompt has n rollouts
            assert s["coba/prompt_mean_score"] == pytest.approx(s["critic/score/mean"])


def test_actor_weights_change_and_the_rollout_serves_them(coba_run, tiny):
    for s in coba_run.steps:
        # A step whose groups all pass or all fail has zero advantages and so no policy gradient
        # (the tiny model often fails every prompt of a step); any other step must have one.
        has_signal = s["critic/advantages/max"] > 0 or s["critic/advantages/min"] < 0
        assert (s["actor/grad_norm"] > 0) == has_signal, (s["step"], s["actor/grad_norm"])
        # Rollout log-probs (hf server) against the actor's recomputation on the same tokens: the
        # server must hold the weights of the previous update, or this grows with every step.
        assert s["training/rollout_probs_diff_mean"] < 1e-5, s["training/rollout_probs_diff_mean"]
        assert s["training/rollout_actor_probs_pearson_corr"] > 0.999
    assert any(s["actor/grad_norm"] > 0 for s in coba_run.steps)
    initial = load_file(tiny / "model" / "model.safetensors")
    actor = coba_run.out / "ckpt" / "global_step_4" / "actor"
    shards = sorted(actor.glob("model_world_size_*_rank_0.pt"))
    assert shards, sorted(p.name for p in actor.iterdir())
    weights = torch.load(shards[0], map_location="cpu", weights_only=False)
    name = "model.layers.0.mlp.down_proj.weight"
    after = weights[name].full_tensor() if hasattr(weights[name], "full_tensor") else weights[name]
    assert not torch.allclose(after.float(), initial[name].float())


def test_checkpoint_holds_the_allocator(coba_run):
    from coba_verl.verl_plugin.hooks.dataloader import STATE_KEY

    data = torch.load(coba_run.out / "ckpt" / "global_step_2" / "data.pt", weights_only=False)
    assert data[STATE_KEY]["allocator"]["tracker"]["steps"] == 2


@pytest.mark.e2e_extended  # CI resumes V1 in the kill test below (a harder resume)
@pytest.mark.parametrize("coba_run", ["v1", "classic"], indirect=True)
def test_resume_from_a_checkpoint_reproduces_the_budgets(coba_run, tiny, tmp_path):
    """Resume from step r (`RESUME_FROM`): steps r+1 and r+2 give every prompt the budget of the
    uninterrupted run (step 3, the first of epoch 2, with budgets that differ). Step r+1's budgets
    depend only on the restored tracker; step r+2's also on step r+1's scores, sampled from the
    restored weights (the hf server's samples of a prompt are reproducible as a set). Later steps
    would depend on an update whose mini-batches follow the request order (module docstring)."""
    r = coba_run.resume_from
    resumed = train(
        tiny, tmp_path, "coba.strategy=coba", f"trainer.total_training_steps={r + 2}", "trainer.save_freq=-1",
        "trainer.resume_mode=resume_path", *coba_run.trainer,
        f"trainer.resume_from_path={coba_run.out / 'ckpt' / f'global_step_{r}'}",
    )  # fmt: skip
    assert [s["step"] for s in resumed] == [r + 1, r + 2]
    for step in (r + 1, r + 2):
        assert budgets(tmp_path, step) == budgets(coba_run.out, step), step
    assert len(set(budgets(tmp_path, 3).values())) > 1
    for before, after in zip(coba_run.steps[r:], resumed, strict=False):
        for key in ALLOCATION_METRICS:
            name = f"coba/{key}"
            assert np.isclose(before.get(name, np.nan), after.get(name, np.nan), equal_nan=True), (
                before["step"], name,
            )  # fmt: skip


@pytest.mark.e2e_extended
def test_classic_uniform_reproduces_stock_veRL(tiny, tmp_path):
    """coba.strategy=uniform in the classic trainer (rows, rollout.n=1, mini-batches x n) against
    veRL's unmodified RayPPOTrainer with rollout.n=4: same trajectories, same scores, same
    advantages and the same update, step after step. One mini-batch of 16 prompts a step (the
    recipe has 2): which sample a session gets follows the request order (module docstring), and
    with one mini-batch the update does not depend on the order of the rows."""
    common = (
        "trainer.total_training_steps=2", "trainer.save_freq=-1", CLASSIC,
        f"actor_rollout_ref.actor.ppo_mini_batch_size={M}",
    )  # fmt: skip
    stock_out, uniform_out = tmp_path / "stock", tmp_path / "uniform"
    stock_out.mkdir(), uniform_out.mkdir()
    stock = train(tiny, stock_out, *common, script=(str(REPO / "tests/cpu_backend/stock_classic_main.py"),))
    uniform = train(tiny, uniform_out, "coba.strategy=uniform", *common)
    assert [s["step"] for s in stock] == [s["step"] for s in uniform] == [1, 2]
    assert "coba/budget_mean" not in stock[0] and uniform[0]["coba/budget_max"] == N
    for step in (1, 2):
        key = lambda row: (row["input"], row["gts"], row["output"], row["score"])  # noqa: E731
        assert sorted(map(key, trained(stock_out, step))) == sorted(map(key, trained(uniform_out, step)))
    for before, after in zip(stock, uniform, strict=True):
        for name in (
            "critic/score/mean", "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
            "response_length/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy",
        ):  # fmt: skip
            assert after[name] == pytest.approx(before[name], rel=1e-5, abs=1e-6), (before["step"], name)


@pytest.fixture(scope="module")
def dapo_run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("dapo")
    steps = train(tiny, out, "trainer.total_training_steps=3", "trainer.save_freq=-1", *DAPO)
    return out, steps


#: What uniform GRPO trains a step in the tiny recipe: M x n single-turn rows, no padding (one rank),
#: ppo_mini_batch_size = 8 prompts, so 64 / (8 x 4) = 2 optimizer steps (ppo_epochs = 1).
UNIFORM_STEP = {"coba/trained_rollouts": M * N, "coba/trained_rows": M * N, "coba/padding_rows": 0,
                "coba/optimizer_steps": 2}  # fmt: skip


def test_dapo_dynamic_sampling_trains_m_times_n_rollouts_with_signal_from_rounds_of_m_times_n(dapo_run):
    out, steps = dapo_run
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        groups = trained_groups(out, s["step"])
        assert sum(map(len, groups.values())) == M * N  # veRL's dump: exactly what uniform trains
        assert {key: s[key] for key in UNIFORM_STEP} == UNIFORM_STEP
        # DAPO keeps groups with a reward spread; the default random cut (coba.cut_sessions=auto) may
        # take it from a group cut to make M x n, and a step cuts at most two (select_to_budget)
        without_spread = sum(len({row["score"] for row in rows}) == 1 for rows in groups.values())
        assert without_spread <= (2 if s["coba/cut_rollouts"] > 0 else 0), (s["step"], without_spread)
        assert all(len({row["input"] for row in rows}) == 1 for rows in groups.values())
        assert 2 <= min(map(len, groups.values())) and max(map(len, groups.values())) <= 16  # recipe bounds
        # the trained tokens are veRL's own response lengths of the batch (one rank: no padding rows)
        assert s["coba/tokens_trained"] == pytest.approx(s["response_length/mean"] * M * N, rel=1e-6)
        # every generated group is observed once: trained, evicted, or cut from a trained group
        assert s["coba/rollouts"] == s["coba/rollouts_generated"] > M * N
        assert (
            s["coba/trained_rollouts"] + s["coba/evicted_rollouts"] + s["coba/cut_rollouts"]
            == s["coba/rollouts_generated"]
        )
        cleared = [f"training/filter_groups/{k}" for k in ("evicted_samples", "discarded_surplus_samples")]
        assert s["coba/evicted_groups"] == sum(s.get(key, 0) for key in cleared) > 0
        if s["coba/rounds"] > 0:
            assert s["coba/budget_mean"] == N
    assert sum(s["coba/rounds"] for s in steps) >= 4  # more prompts drawn than the steps train
    assert max(s["coba/budget_std"] for s in steps if s["coba/rounds"] > 0) > 0  # CoBA after epoch 1


@pytest.mark.e2e_extended  # one more run of about 2 minutes
def test_dapo_uniform_trains_the_same_rows_and_optimizer_steps_as_coba(dapo_run, tiny, tmp_path):
    _, coba = dapo_run
    uniform = train(
        tiny,
        tmp_path,
        "trainer.total_training_steps=3",
        "trainer.save_freq=-1",
        "coba.strategy=uniform",
        *DAPO,
    )
    for c, u in zip(coba, uniform, strict=True):
        assert {key: u[key] for key in UNIFORM_STEP} == UNIFORM_STEP == {key: c[key] for key in UNIFORM_STEP}
        assert u["perf/total_num_tokens"] > 0 and c["perf/total_num_tokens"] > 0


def grpo_advantage_range(out: Path, step: int, group_weight: str) -> tuple[float, float]:
    """(min, max) of the advantages veRL should train at ``step``, recomputed from the rollout dump:
    GRPO's (score - group mean) / (group std + 1e-6) (unbiased std; 0 for a group of one), times
    `rollout_weights`' factor (R / G) / B_g under ``equal``."""
    from coba_verl.core.group_weight import rollout_weights

    groups = trained_groups(out, step)
    uids = [uid for uid, rows in groups.items() for _ in rows]
    factors = rollout_weights(np.asarray(uids), group_weight)
    advantages = []
    for rows in groups.values():
        scores = np.array([row["score"] for row in rows], dtype=np.float64)
        std = scores.std(ddof=1) if scores.size > 1 else 1.0
        advantages += list((scores - scores.mean()) / (std + 1e-6) if scores.size > 1 else 0 * scores)
    weighted = np.asarray(advantages) * factors
    return float(weighted.min()), float(weighted.max())


@pytest.mark.e2e_extended  # one more run of about 2 minutes; CI runs the scripted fit() tests
def test_equal_group_weight_scales_the_advantages_veRL_trains_by_the_group_factor(tiny, tmp_path):
    steps = train(
        tiny, tmp_path, "coba.group_weight=equal",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "trainer.total_training_steps=3", "trainer.save_freq=-1",
    )  # fmt: skip
    assert steps[2]["coba/budget_std"] > 0  # step 3: budgets differ, so factors do
    for s in steps:  # epoch 1: every factor is 1; step 3: (R / G) / B_g, as the dump's groups give
        low, high = grpo_advantage_range(tmp_path, s["step"], "equal")
        assert s["critic/advantages/min"] == pytest.approx(low, rel=1e-4, abs=1e-5), s["step"]
        assert s["critic/advantages/max"] == pytest.approx(high, rel=1e-4, abs=1e-5), s["step"]
    plain = grpo_advantage_range(tmp_path, 3, "proportional")
    assert plain != pytest.approx(grpo_advantage_range(tmp_path, 3, "equal"))  # the check has teeth


@pytest.mark.e2e_extended  # two more runs (about 2 minutes each): CI runs tests/verl_plugin/test_estimate.py
def test_estimate_measures_every_prompt_with_veRL_and_a_run_with_the_priors_allocates_step_one_from_them(
    tiny, tmp_path
):
    """``coba-verl estimate`` (veRL's validation pass over the training set, k = 4), then one step
    of coba with ``coba.prior_file``: step 1's budgets are the allocator's from the measured priors."""
    import pyarrow.parquet as pq

    from coba_verl.arithmetic.tiny import compute_score
    from coba_verl.core import BudgetAllocator, CobaConfig
    from coba_verl.records.priors import apply_priors, read_prior_file
    from coba_verl.records.prompt_ids import PromptIdMap

    priors = tmp_path / "priors.jsonl"
    estimate = ("-m", "coba_verl.verl_plugin.estimate", "--output", str(priors), "--samples", str(N))
    (tmp_path / "estimate").mkdir()
    train(tiny, tmp_path / "estimate", script=estimate)
    index = [row["index"] for row in pq.read_table(tiny / "train.parquet").column("extra_info").to_pylist()]
    records = [json.loads(line) for line in priors.read_text().splitlines()]
    assert [r["index"] for r in records] == index  # every training prompt, in row order
    assert all(r["attempts"] == N for r in records)
    dump = tmp_path / "priors.generations" / "0.jsonl"
    dumped = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(dumped) == N * len(index)
    for row in dumped:  # the score is the recipe's own reward of the generation
        assert row["score"] == compute_score("coba_arithmetic", row["output"], row["gts"])
    successes = Counter(json.loads(row["coba_index"]) for row in dumped if row["score"] == 1.0)
    assert {r["index"]: r["successes"] for r in records} == {i: successes[i] for i in index}
    assert 0 < sum(successes.values()) < len(dumped)  # pass rates spread: the priors carry information

    (tmp_path / "run").mkdir()
    steps = train(tiny, tmp_path / "run", "trainer.total_training_steps=1", f"coba.prior_file={priors}")
    step_one = budgets(tmp_path / "run", 1)
    assert sum(step_one.values()) == M * N and len(step_one) == M
    assert len(set(step_one.values())) > 1 and steps[0]["coba/budget_std"] > 0  # no blind first epoch
    # the allocator's own answer from the same priors, for step 1's prompts (text -> index: the dump)
    index_of = {(row["input"], row["gts"]): json.loads(row["coba_index"]) for row in dumped}
    config = CobaConfig(strategy="coba", min_rollouts=2, max_rollouts=16)  # the tiny recipe's
    prompt_ids = PromptIdMap(index)
    allocator = BudgetAllocator(config, num_prompts=len(index))
    apply_priors(allocator.tracker, prompt_ids, read_prior_file(priors, config.prior_weight))
    prompts = list(step_one)
    expected = allocator.allocate(prompt_ids.ids([index_of[p] for p in prompts]), M * N).budgets
    # prompts of equal priors tie, and ties may break by position: compare within each prior record
    prior_of = {r["index"]: (r["successes"], r["attempts"]) for r in records}
    by_prior: dict[tuple, tuple[list, list]] = {}
    for prompt, want in zip(prompts, expected, strict=True):
        got, wanted = by_prior.setdefault(prior_of[index_of[prompt]], ([], []))
        got.append(step_one[prompt])
        wanted.append(int(want))
    for prior, (got, wanted) in by_prior.items():
        assert sorted(got) == sorted(wanted), prior


# ---------------------------------------------------------------------- the GPU run's layout on CPU
#: Two trainer ranks (so two hf replicas, one per rank in hybrid mode), two agent-loop workers,
#: dynamic batch sizes, and a budget of M x 8 with B_up = 64: the layout of a multi-GPU recipe.
LAYOUT_N, LAYOUT_B_UP = 8, 64
LAYOUT = (
    "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.agent.num_workers=2",
    "actor_rollout_ref.actor.use_dynamic_bsz=true", f"actor_rollout_ref.rollout.n={LAYOUT_N}",
    f"coba.max_rollouts={LAYOUT_B_UP}", "trainer.total_training_steps=2", "trainer.save_freq=-1",
)  # fmt: skip
#: What uniform GRPO trains a step in that layout: 16 x 8 rows, lcm(2 ranks, 8 x 8) = 64 divides
#: them (no padding), 128 / 64 = 2 optimizer steps.
LAYOUT_UNIFORM_STEP = {"coba/trained_rollouts": M * LAYOUT_N, "coba/trained_rows": M * LAYOUT_N,
                       "coba/padding_rows": 0, "coba/optimizer_steps": 2}  # fmt: skip


def layout_run(tiny: Path, out: Path, *overrides: str) -> SimpleNamespace:
    """The layout run with every request logged by the hf servers. One prompt's prior pass rate is
    0.5 and every other's 0, so the round holding it gives it B_up = 64 (the others 4 or 5)."""
    import pyarrow.parquet as pq

    from coba_verl.cpu.hf_env import REQUEST_LOG_ENV

    indices = [row["index"] for row in pq.read_table(tiny / "train.parquet").column("extra_info").to_pylist()]
    priors = out / "priors.jsonl"
    priors.write_text("".join(json.dumps({"index": i, "pass_rate": 0.5 if i == indices[0] else 0.0}) + "\n"
                              for i in indices))  # fmt: skip
    logs = out / "requests"
    logs.mkdir()
    steps = train(
        tiny, out, *LAYOUT, f"coba.prior_file={priors}", *overrides, env={REQUEST_LOG_ENV: str(logs)}
    )
    timelines = {
        int(path.stem.rsplit("-", 1)[1]): [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(logs.glob("requests-*.jsonl"))
    }
    return SimpleNamespace(out=out, steps=steps, timelines=timelines)


def requests_by_step(run: SimpleNamespace) -> dict[int, list[dict]]:
    """Requests of each training step (the step after the weights they were served with)."""
    by_step: dict[int, list[dict]] = {}
    for timeline in run.timelines.values():
        for entry in timeline:
            if "request_id" in entry:
                by_step.setdefault(entry["global_steps"] + 1, []).append(entry)
    return by_step


@pytest.fixture(scope="module")
def layout(tiny, tmp_path_factory):
    return layout_run(tiny, tmp_path_factory.mktemp("layout"))


def test_gpu_layout_each_prompt_gets_b_i_single_requests_with_one_set_of_sampling_parameters(layout, tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny / "model")
    by_step = requests_by_step(layout)
    assert sorted(by_step) == [1, 2] and sorted(layout.timelines) == [0, 1]  # two replicas served
    assert max(max(budgets(layout.out, step).values()) for step in (1, 2)) == LAYOUT_B_UP  # a prompt at B_up
    for step, requests in by_step.items():
        asked = Counter(tokenizer.decode(r["prompt_ids"], skip_special_tokens=True) for r in requests)
        trained_per_prompt = Counter(row["input"] for row in trained(layout.out, step))
        assert asked == trained_per_prompt  # B_i requests of one sample each, every one trained
    params = {json.dumps(r["sampling_params"], sort_keys=True) for rs in by_step.values() for r in rs}
    assert len(params) == 1  # whatever the budget: what uniform GRPO sends (see the extended run)
    assert {r["priority"] for rs in by_step.values() for r in rs} == {0}


def test_gpu_layout_every_request_uses_the_last_update_and_none_reaches_a_sleeping_replica(layout):
    for replica, timeline in layout.timelines.items():
        asleep, weights = set(), None
        for entry in timeline:
            if entry.get("event") in ("sleep", "wake_up"):
                asleep = set(entry["asleep"])
            elif entry.get("event") == "update_weights":
                weights = entry["global_steps"]
            else:
                assert not asleep, (replica, entry["request_id"])
                assert entry["global_steps"] == weights  # the weights of the update before the step
    for step, requests in requests_by_step(layout).items():
        assert {r["global_steps"] for r in requests} == {step - 1}


def test_gpu_layout_serves_each_request_once_on_replicas_that_all_take_every_update(layout):
    """Which replica serves a request is veRL's router's choice (least loaded in flight, random
    ties), and how evenly it splits depends on how fast each replica finishes on the machine at the
    time, so no split is pinned (docs/verl.md). What the package promises: every replica takes the
    weights of every update before the next step, every request is served once, by one replica,
    and the step trains uniform's rows and optimizer steps."""
    steps = sorted(requests_by_step(layout))
    for replica, timeline in layout.timelines.items():
        updates = {entry["global_steps"] for entry in timeline if entry.get("event") == "update_weights"}
        assert {step - 1 for step in steps} <= updates, (replica, sorted(updates))
    for requests in requests_by_step(layout).values():
        served = Counter(r["request_id"] for r in requests)
        assert set(served.values()) == {1}  # no request served twice, on one replica or two
    for s in layout.steps:
        assert {key: s[key] for key in LAYOUT_UNIFORM_STEP} == LAYOUT_UNIFORM_STEP


@pytest.mark.e2e_extended  # three more layout runs of a few minutes each
@pytest.mark.parametrize("variant", ["uniform", "dapo", "classic"])
def test_gpu_layout_variants_send_the_same_sampling_parameters_and_train_uniforms_rows(
    layout, tiny, tmp_path, variant
):
    overrides = {"uniform": ("coba.strategy=uniform",), "dapo": DAPO, "classic": (CLASSIC,)}[variant]
    run = layout_run(tiny, tmp_path, *overrides)
    params = {
        json.dumps(r["sampling_params"], sort_keys=True) for rs in requests_by_step(run).values() for r in rs
    }
    reference = {
        json.dumps(r["sampling_params"], sort_keys=True)
        for rs in requests_by_step(layout).values()
        for r in rs
    }
    assert params == reference
    test_gpu_layout_every_request_uses_the_last_update_and_none_reaches_a_sleeping_replica(run)
    if variant != "classic":  # the classic trainer logs no coba/trained_* (its batch is M x n rows)
        for s in run.steps:
            assert {key: s[key] for key in LAYOUT_UNIFORM_STEP} == LAYOUT_UNIFORM_STEP


#: Seconds each decoded token takes in the colocate_async run, whose server decodes 16 requests at a
#: time: the round generated ahead (64 requests, 4 batches of about a second each) is still being
#: written when veRL, polling every 2 s, has the round it trains and aborts generation for the
#: update; its answers are resumed, with their tokens, under the new weights.
DECODE_PACE_S = "0.25"


@pytest.fixture(scope="module")
def colocate_async_run(tiny, tmp_path_factory):
    """veRL's colocate_async trainer with the hf server's partial rollout, 4 steps (3 and 4 with
    budgets from history), one warm-up batch, answers of up to 16 tokens decoded 16 at a time at
    `DECODE_PACE_S` a token; every request and abort in the request log."""
    from coba_verl.cpu.hf_env import DECODE_PACE_ENV, REQUEST_LOG_ENV

    out = tmp_path_factory.mktemp("colocate-async")
    steps = train(
        tiny, out, "trainer.total_training_steps=4", "trainer.save_freq=-1",
        "trainer.v1.trainer_mode=colocate_async", "trainer.v1.colocate_async.num_warmup_batches=1",
        "data.max_response_length=16", "actor_rollout_ref.rollout.max_num_seqs=16",
        env={REQUEST_LOG_ENV: str(out), DECODE_PACE_ENV: DECODE_PACE_S},
    )  # fmt: skip
    return out, steps


def test_colocate_async_trains_m_times_n_rollouts_an_update_on_the_hf_servers_partial_rollout(
    colocate_async_run,
):
    out, steps = colocate_async_run
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for s in steps:
        groups = trained_groups(out, s["step"])
        assert sum(map(len, groups.values())) == M * N  # veRL's dump: exactly what uniform trains
        assert {key: s[key] for key in UNIFORM_STEP} == UNIFORM_STEP
        settled = sum(s[f"coba/{fate}_rollouts"] for fate in ("trained", "cut", "evicted", "failed"))
        assert (
            s["coba/rollouts"]
            == s["coba/trained_rollouts"] + s["coba/cut_rollouts"] + s["coba/evicted_rollouts"]
        )
        assert s["coba/in_flight_rollouts"] > 0  # generation ran ahead of every update
        s["settled"] = settled
    generated = sum(s["coba/rollouts_generated"] for s in steps)
    assert generated == sum(s["settled"] for s in steps) + steps[-1]["coba/in_flight_rollouts"]
    assert max(s["coba/budget_std"] for s in steps if s["coba/rounds"] > 0) > 0  # CoBA after epoch 1
    assert max(s["coba/versions_behind_max"] for s in steps) >= 1
    events = [
        json.loads(line).get("event")
        for log in out.glob("requests-*.jsonl")
        for line in log.read_text().splitlines()
    ]
    assert events.count("abort") >= 4 and events.count("resume_generation") >= 3  # one per update


def test_colocate_async_answers_cross_weight_versions_and_are_dated_to_the_weights_that_finished_them(
    colocate_async_run,
):
    """Answers aborted at an update are sent again with their tokens and finished by the next
    weights (veRL's trajectory spans > 1). The ledger dates each trained session to the weights that
    finished it (the tags' max_global_steps), so its versions behind are veRL's trajectory staleness,
    which veRL computes from the same tags, for every update; dated to their submission, they
    would be veRL's worst-case staleness instead."""
    out, steps = colocate_async_run
    assert max(s["training/off_policy/trajectory_spans/max"] for s in steps) > 1
    prompts = [
        tuple(entry["prompt_ids"])
        for log in out.glob("requests-*.jsonl")
        for entry in map(json.loads, log.read_text().splitlines())
        if "request_id" in entry
    ]
    sent, lengths = set(prompts), {len(p) for p in prompts}
    resumed = [p for p in prompts if any(p[:n] in sent for n in lengths if n < len(p))]
    assert resumed  # a request whose prompt is an earlier request's prompt plus its answer so far
    for s in steps:
        assert s["coba/versions_behind_max"] == s["training/off_policy/trajectory_staleness/max"]
        assert s["coba/versions_behind_mean"] == pytest.approx(
            s["training/off_policy/trajectory_staleness/mean"]
        )
    assert any(
        s["training/off_policy/trajectory_staleness/mean"]
        != s["training/off_policy/trajectory_staleness_worst/mean"]
        for s in steps
    )  # some trained answer did span versions: the two datings differ


SEPARATE_ASYNC = (
    "trainer.v1.trainer_mode=separate_async", "trainer.v1.separate_async.parameter_sync_step=2",
    "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
)  # fmt: skip


@pytest.fixture(scope="module")
def separate_async_run(tiny, tmp_path_factory):
    """veRL's separate_async trainer: a standalone pool of one hf server fed weights by the object-store
    checkpoint engine, the trainer's own replica generating only until step 1 (veRL's hybrid switch
    off), 2 local updates per weight sync; 4 steps (3 and 4 with budgets from history), a checkpoint
    at step 2; every request and weight load in the request logs."""
    out = tmp_path_factory.mktemp("separate-async")
    steps = train(
        tiny, out, "trainer.total_training_steps=4", "trainer.save_freq=2", *SEPARATE_ASYNC,
        env={"COBA_HF_REQUEST_LOG": str(out)},
    )  # fmt: skip
    return SimpleNamespace(out=out, steps=steps)


@pytest.fixture(scope="module")
def separate_async_resumed(separate_async_run, tiny, tmp_path_factory):
    """The separate_async run resumed from its step-2 checkpoint, to step 4."""
    out = tmp_path_factory.mktemp("separate-async-resumed")
    checkpoint = separate_async_run.out / "ckpt" / "global_step_2"
    return train(
        tiny, out, "trainer.total_training_steps=4", "trainer.save_freq=-1", *SEPARATE_ASYNC,
        "trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}",
    )  # fmt: skip


def request_log(out: Path) -> dict[int, list[dict]]:
    """replica -> its request log (requests and events, in order)."""
    return {
        int(log.stem.split("-")[1]): [json.loads(line) for line in log.read_text().splitlines()]
        for log in out.glob("requests-*.jsonl")
    }


@pytest.mark.e2e_extended  # CI: separate_async through veRL's fit() (tests/verl_plugin) and the engine's test
def test_separate_async_trains_m_times_n_an_update_with_weights_sent_to_the_standalone_pool(
    separate_async_run,
):
    run = separate_async_run
    assert [s["step"] for s in run.steps] == [1, 2, 3, 4]
    for s in run.steps:
        assert sum(map(len, trained_groups(run.out, s["step"]).values())) == M * N  # veRL's dump
        assert {key: s[key] for key in UNIFORM_STEP} == UNIFORM_STEP  # 2 local updates of M x n / 2
        assert (
            s["coba/rollouts"]
            == s["coba/trained_rollouts"] + s["coba/cut_rollouts"] + s["coba/evicted_rollouts"]
        )
    settled = sum(
        s[f"coba/{fate}_rollouts"] for s in run.steps for fate in ("trained", "cut", "evicted", "failed")
    )
    generated = sum(s["coba/rollouts_generated"] for s in run.steps)
    assert generated == settled + run.steps[-1]["coba/in_flight_rollouts"]
    assert max(s["coba/budget_std"] for s in run.steps if s["coba/rounds"] > 0) > 0  # CoBA after epoch 1
    logs = request_log(run.out)
    assert sorted(logs) == [0, 1]  # the trainer's hybrid replica and the standalone one
    standalone = logs[1]
    loads = [e["global_steps"] for e in standalone if e.get("event") == "update_weights"]
    assert loads == sorted(loads) and set(range(1, 5)) <= set(loads)  # one sync per step, in order
    served = [e for e in standalone if "request_id" in e]
    assert served and {e["version"] for e in served} != {0}  # it generated, under weights it was sent
    assert not any(e.get("event") == "sleep" for e in standalone)  # the standalone pool never sleeps


@pytest.mark.e2e_extended
def test_separate_async_resumed_from_a_checkpoint_trains_m_times_n_and_counts_restored_prompts_once(
    separate_async_run, separate_async_resumed
):
    resumed = separate_async_resumed
    assert [s["step"] for s in resumed] == [3, 4]
    for s in resumed:
        assert {key: s[key] for key in UNIFORM_STEP} == UNIFORM_STEP
    restored = separate_async_run.steps[1]["coba/in_flight_rollouts"]  # in flight when step 2 saved
    settled = sum(
        s[f"coba/{fate}_rollouts"] for s in resumed for fate in ("trained", "cut", "evicted", "failed")
    )
    generated = sum(s["coba/rollouts_generated"] for s in resumed)
    assert restored + generated == settled + resumed[-1]["coba/in_flight_rollouts"]


# ---------------------------------------------------------------------- killed, then resumed
#: The step during which a run is killed: the first of epoch 2, whose budgets differ.
KILL_STEP = 3
KILL_RUN = ("trainer.total_training_steps=4", "trainer.save_freq=1")
#: Extra settings of a kill point's two launches: at ``update`` the replicas sleep after generation
#: (veRL's default; the CPU backend's is not to), so that the end of generation is logged. The
#: ``hf`` server's samples do not depend on it.
KILL_POINT_RUN = {"update": ("actor_rollout_ref.rollout.free_cache_engine=true",)}


def _log_entries(logs: Path) -> list[dict]:
    """The hf servers' request and event log so far (a line being written is skipped)."""
    entries = []
    for path in sorted(logs.glob("requests-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return entries


def kill_point_reached(point: str, logs: Path, ckpt: Path) -> bool:
    """Whether the run is at ``point`` of step `KILL_STEP`:

    * ``generation``: the hf server got all M x n requests of the step (served with the weights of
      the update before it) and is generating;
    * ``update``: after the step's requests the replicas went to sleep (veRL's ``on_sample_end``;
      logged with ``rollout.free_cache_engine=true``, see `KILL_POINT_RUN`): the trainer is past
      generation and before its checkpoint, computing log-probs and advantages and updating the
      actor (0.5 s in all on the tiny model, so the kill lands early in it);
    * ``checkpoint``: the step's checkpoint is being written: its actor part is on disk and veRL
      is opening ``data.pt``, where it waits, because `hold_checkpoint` put a named pipe with no
      reader there; veRL's tracker (``latest_checkpointed_iteration.txt``, written last,
      ``trainer_base.py:1021-1025``) still names the step before. (The whole save takes about
      20 ms on the tiny model, too short to catch from outside.)
    """
    if point == "checkpoint":
        actor = ckpt / f"global_step_{KILL_STEP}" / "actor"
        if not (actor / "huggingface").is_dir() or not list(actor.glob("extra_state_*.pt")):
            return False
        time.sleep(2)  # the actor part is written; veRL now waits at data.pt's open
        return True
    requests = 0
    for entry in _log_entries(logs):
        if entry.get("request_id") is not None and entry.get("global_steps") == KILL_STEP - 1:
            requests += 1
            if point == "generation" and requests == M * N:
                return True
        elif requests and entry.get("event") == "sleep":
            return True
    return False


def requests_per_prompt(logs: Path, step: int) -> Counter:
    """Prompt token ids -> requests the hf servers got for it at ``step``: its budget B_i."""
    served = [
        e for e in _log_entries(logs) if e.get("request_id") is not None and e["global_steps"] == step - 1
    ]
    return Counter(tuple(e["prompt_ids"]) for e in served)


def hold_checkpoint(ckpt: Path) -> Path:
    """A named pipe with no reader where step `KILL_STEP`'s ``data.pt`` goes: veRL's ``torch.save``
    blocks opening it, after the checkpoint's actor part and before its tracker."""
    folder = ckpt / f"global_step_{KILL_STEP}"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "data.pt")
    return folder / "data.pt"


def half_write(pipe: Path) -> None:
    """Leave what a kill during the write of ``data.pt`` leaves: the first bytes of a file."""
    pipe.unlink()
    pipe.write_bytes(b"PK\x03\x04")  # the start of torch.save's zip archive, and nothing else


def _session(root, sid: int) -> dict:
    """pid -> process of ``root`` and its descendants that are in session ``sid`` (Ray's workers
    run in process groups of their own, in the session of the run)."""
    import psutil

    members = {}
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return members
    for p in processes:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getsid(p.pid) == sid:
                members[p.pid] = p
    return members


def run_and_kill(tiny: Path, out: Path, point: str, *overrides: str, timeout: float = 600) -> SimpleNamespace:
    """Start the tiny recipe in a session of its own, SIGKILL every process of the session at once
    at ``point`` (as a node failure or a job scheduler's cancel would: the driver, Ray's daemons,
    and Ray's workers, which run in process groups of their own), then wait 60 s at most for
    every process the run had started, in its session or not, to be gone."""
    import psutil

    from coba_verl.cpu.hf_env import REQUEST_LOG_ENV

    logs, ckpt = out / "requests", out / "ckpt"
    logs.mkdir()
    pipe = hold_checkpoint(ckpt) if point == "checkpoint" else None
    console = (out / "console.log").open("w")
    env = tiny_env(out, {REQUEST_LOG_ENV: str(logs)})
    proc = subprocess.Popen(
        tiny_command(tiny, out, *overrides), env=env, cwd=out, stdout=console, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    root = psutil.Process(proc.pid)
    deadline, family, listed = time.monotonic() + timeout, {}, 0.0
    try:
        while not kill_point_reached(point, logs, ckpt):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (out / "console.log").read_text()[-3000:]
                raise AssertionError(
                    f"the run ended (exit {proc.returncode}) or timed out before {point}:\n{tail}"
                )
            if time.monotonic() - listed > 0.5:  # the run's processes, listed ahead of the kill
                with contextlib.suppress(psutil.Error):
                    family.update({p.pid: p for p in [root, *root.children(recursive=True)]})
                listed = time.monotonic()
            time.sleep(0.02)
        killed = _session(root, proc.pid)
        for pid in killed:  # the session at once; then whatever of it the listing had missed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            for pid in set(_session(root, proc.pid)) - set(killed):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        family.update(killed)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # a failed wait above: do not leave the run behind
        proc.wait()
        console.close()
    _, alive = psutil.wait_procs(list(family.values()), timeout=60)
    if pipe is not None:
        half_write(pipe)
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    return SimpleNamespace(
        out=out, ckpt=ckpt, family=len(family), alive=[f"{p.pid} {p.name()}" for p in alive],
        tracker=int(tracker.read_text()) if tracker.exists() else 0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("point", "dapo"),
    [("checkpoint", ()), pytest.param("generation", (), marks=pytest.mark.e2e_extended),
     pytest.param("update", (), marks=pytest.mark.e2e_extended),
     pytest.param("checkpoint", DAPO, marks=pytest.mark.e2e_extended, id="checkpoint-dapo")],
)  # fmt: skip  # one kill point in the default run (two launches), all four with -m e2e
def test_a_run_killed_mid_step_resumes_from_its_last_whole_checkpoint_with_the_same_budgets(
    point, dapo, tiny, tmp_path
):
    """SIGKILL of every process of a V1 sync run (with DAPO: ``dapo``) during step 3
    (`kill_point_reached`), then a relaunch with ``trainer.resume_mode=auto`` on the same
    checkpoint folder: nothing of the killed run (Ray included) is left; the relaunch resumes
    from the last checkpoint veRL's tracker names (step 2), never from the half-written one; and
    step 3 gives every prompt the budget the killed run had given it (from the hf server's
    request logs of both launches). An uninterrupted launch is no reference: two launches of one
    run differ from step 2 on (docs/verl.md, "Two launches of one run")."""
    from coba_verl.cpu.hf_env import REQUEST_LOG_ENV

    (tmp_path / "killed").mkdir(), (tmp_path / "resumed" / "requests").mkdir(parents=True)
    overrides = (*KILL_RUN, *KILL_POINT_RUN.get(point, ()), *dapo)
    killed = run_and_kill(tiny, tmp_path / "killed", point, *overrides)
    assert killed.family > 3 and killed.alive == []  # the driver, Ray's daemons and workers: all gone
    assert killed.tracker == KILL_STEP - 1
    if point == "checkpoint":  # the half-written folder: the actor part and 4 bytes of data.pt
        assert (killed.ckpt / f"global_step_{KILL_STEP}" / "data.pt").stat().st_size == 4
    logs = tmp_path / "resumed" / "requests"
    resumed = train(
        tiny, tmp_path / "resumed", *overrides, "trainer.resume_mode=auto", ckpt=killed.ckpt,
        env={REQUEST_LOG_ENV: str(logs)},
    )  # fmt: skip
    assert [s["step"] for s in resumed] == [KILL_STEP, KILL_STEP + 1]
    before = requests_per_prompt(killed.out / "requests", KILL_STEP)
    assert len(set(before.values())) > 1  # budgets differ
    assert requests_per_prompt(logs, KILL_STEP) == before
    if not dapo:  # the whole step, and veRL trained it (DAPO draws more rounds than it trains)
        assert sum(before.values()) == M * N
        assert sorted(budgets(tmp_path / "resumed", KILL_STEP).values()) == sorted(before.values())
