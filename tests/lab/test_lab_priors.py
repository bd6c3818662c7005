"""``+prior`` runs in the lab: the tracker starts from k samples per training prompt of the warm start."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.arithmetic.task import Split
from coba_verl.arithmetic.tokenizer import build_tokenizer
from coba_verl.lab import runner
from coba_verl.lab.config import LabConfig, RunSpec, parse_run_label
from coba_verl.lab.evaluation import measure_priors
from coba_verl.lab.oracle import ESTIMATION_KEYS
from coba_verl.lab.seeds import SeedContext, build_context, new_model

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "warm_steps": 0}


def test_run_label_option_prior_round_trips_with_weight_and_scale() -> None:
    assert parse_run_label("coba+prior") == RunSpec("coba", prior=True)
    assert parse_run_label("coba:proportional+prior@0.5") == RunSpec("coba", 0.5, "proportional", True)
    assert parse_run_label("coba:proportional+prior@0.5").label == "coba:proportional+prior@0.5"
    assert parse_run_label("knapsack").prior is False


def test_unknown_run_option_names_it() -> None:
    with pytest.raises(ValueError, match=r"run option 'prio' in 'coba\+prio' is unknown"):
        parse_run_label("coba+prio")


@pytest.mark.parametrize("key", ["prior_file", "prior_field"])
def test_lab_refuses_prior_keys_of_the_frameworks_and_says_to_use_the_label(key: str) -> None:
    with pytest.raises(ValueError, match=rf"coba.{key}=.*label a run '\+prior'"):
        LabConfig(**TINY, coba={key: "x"})


def _context(cfg: LabConfig) -> SeedContext:
    prompts = [f"{d}+1=" for d in range(8)]
    split = Split(prompts, [str(d + 1) for d in range(8)], np.zeros(8, dtype=np.int64))
    state = new_model(cfg, build_tokenizer(), 0).state_dict()
    return build_context(cfg, 0, split, split, state)


@pytest.fixture
def parity(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scorer with outcomes of both kinds for a random model: parity of the response's characters."""
    score = lambda texts, answers: np.array([sum(map(ord, t)) % 2 for t in texts], dtype=np.float32)  # noqa: E731
    monkeypatch.setattr(runner, "score_batch", score)


def test_priors_are_k_samples_of_every_training_prompt_and_do_not_move_the_runs_sampling(parity) -> None:
    cfg = LabConfig(
        **TINY, runs=["uniform", "uniform+prior", "coba", "coba+prior"], n_train=8, n_eval=8, steps=2,
        prompts_per_step=4, rollouts_per_prompt=4, eval_every=2, eval_samples=1, lr=1e-2, prior_samples=6,
    )  # fmt: skip
    ctx = _context(cfg)
    rows: dict[str, list[dict]] = {}
    for label in cfg.runs:
        rows[label] = []
        runner.train_run(cfg, ctx, parse_run_label(label), rows[label].append)
    records = ctx.priors[6]  # measured once for the seed, on the warm start
    assert records.index == list(range(8))
    assert records.attempts.tolist() == [6] * 8
    assert 0 < records.successes.sum() < 48  # both outcomes occur under the parity scorer
    again = measure_priors(
        new_model(cfg, ctx.tok, 0).eval(), ctx, 6, 1.0
    )  # same weights (build_context's state is seed 0's new model), same random numbers
    assert again.successes.tolist() == records.successes.tolist()
    # uniform reads no pass rate and the measurement draws its own random numbers: the same run
    drop = {"run", "prior", "prior_rollouts", "unseen_prompts", "gen_s", "update_s", "plugin_s", "step_s"}
    drop |= {k for k in ESTIMATION_KEYS if k.startswith("est_")}  # the tracker's p̂ measured: priors set it
    strip = {lb: [repr({k: v for k, v in r.items() if k not in drop}) for r in rows[lb]] for lb in rows}
    assert strip["uniform"] == strip["uniform+prior"]  # all but the count of prompts without history
    assert [r["unseen_prompts"] for r in rows["uniform+prior"]] == [0, 0]
    assert [r["prior_rollouts"] for r in rows["coba+prior"]] == [48, 48]
    # coba: step 1 is uniform without history, non-uniform with the priors
    assert rows["coba"][0]["budget_std"] == 0.0
    assert rows["coba+prior"][0]["budget_std"] > 0.0
    assert rows["coba+prior"][0]["unseen_prompts"] == 0 and rows["coba"][0]["unseen_prompts"] == 4


def test_first_allocation_of_a_prior_run_uses_the_records_as_one_window(parity) -> None:
    """The tracker's pass rate of each step-1 prompt is exactly its record's successes / k."""
    cfg = LabConfig(
        **TINY, runs=["coba+prior"], n_train=8, n_eval=8, steps=1, prompts_per_step=4,
        rollouts_per_prompt=4, eval_every=1, eval_samples=1, prior_samples=5,
    )  # fmt: skip
    ctx = _context(cfg)
    snaps: list[dict] = []
    runner.train_run(cfg, ctx, parse_run_label("coba+prior"), lambda row: None, snapshot=snaps.append)
    [snap] = snaps  # one step: the snapshot is step 1
    records = ctx.priors[5]
    expected = records.successes[ctx.order[0]] / 5
    np.testing.assert_allclose(snap["pass_rates"], expected)
