"""`coba-verl plan` (`coba_verl.records.plan_cli`): the prediction against the measured study
`dapo_tiny_n`, the prior file read by the trainer's reader, and the command's refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from coba_verl.core.step_cost import Population, plan_step_cost
from coba_verl.records.plan_cli import main, parse_pass_rates
from coba_verl.records.priors import read_prior_file

ROOT = Path(__file__).resolve().parents[2]
#: The study's priors (`python -m coba_verl.arithmetic.tiny --output-dir DATA --easy --priors 8 --threads 2`,
#: not committed with the study; re-derived, byte for byte the same on every run here: docs/plan.md).
PRIORS = Path(__file__).resolve().parent / "data" / "dapo_tiny_n_priors.jsonl"
MEASURED = ROOT / "docs" / "data" / "dapo_tiny_n"
#: docs/results.md, "veRL, tiny recipe: DAPO at n = 4, 8 and 16": CoBA / uniform, 5 seeds.
PUBLISHED_RATIO = {4: 0.642, 8: 0.812, 16: 1.150}


def measured(n: int, strategy: str) -> np.ndarray:
    """(5,) per seed: sum coba/rollouts_generated / sum coba/trained_rollouts (bench/dapo_tiny.py)."""
    out = []
    for seed in range(5):
        lines = (MEASURED / f"n{n}_{strategy}_seed{seed}.jsonl").read_text().splitlines()
        rows = [d for d in (json.loads(line)["data"] for line in lines) if "coba/trained_rollouts" in d]
        out.append(
            sum(d["coba/rollouts_generated"] for d in rows) / sum(d["coba/trained_rollouts"] for d in rows)
        )
    return np.array(out)


@pytest.fixture(scope="module")
def priors() -> Population:
    records = read_prior_file(PRIORS, 8)
    return Population(records.successes, records.attempts)


def test_the_priors_are_the_studys():
    """Their mean failure rate gives the alpha every CoBA run of the study logged at step 1."""
    records = read_prior_file(PRIORS, 8)
    alpha = 1 + 9 * (1 - np.mean(records.successes / records.attempts))  # spec §3, F_bar > 0.5, kappa 11
    for n in (4, 8, 16):
        first = json.loads((MEASURED / f"n{n}_coba_seed0.jsonl").read_text().splitlines()[1])["data"]
        assert first["coba/alpha"] == pytest.approx(alpha, abs=1e-6)


@pytest.mark.parametrize("n", [4, 8, 16])
def test_the_prediction_is_within_10_percent_of_the_measured_ratio(priors, n):
    """DAPO, M = 16, B_low = 2, B_up = 4n, 16 steps as the study ran: CoBA's rollouts generated per
    trained rollout over uniform's within 10 % of the measured per-seed mean ratio, and each strategy's
    own figure within 10 % too (docs/plan.md has the table)."""
    uniform_runs, coba_runs = measured(n, "uniform"), measured(n, "coba")
    ratio = float(np.mean(coba_runs / uniform_runs))
    assert round(ratio, 3) == PUBLISHED_RATIO[n]
    kw = dict(prompts=16, n=n, max_rollouts=4 * n, dapo=True, steps=16, draws=100, truth="posterior")
    uniform = plan_step_cost(priors, strategy="uniform", **kw)
    coba = plan_step_cost(priors, strategy="coba", **kw)
    assert coba.generated_per_trained / uniform.generated_per_trained == pytest.approx(ratio, rel=0.10)
    assert uniform.generated_per_trained == pytest.approx(uniform_runs.mean(), rel=0.10)
    assert coba.generated_per_trained == pytest.approx(coba_runs.mean(), rel=0.10)


def test_the_cli_prints_uniform_beside_the_strategy(capsys):
    assert main(["--prior-file", str(PRIORS), "--prompts", "16", "--n", "4", "--max-rollouts", "16",
                 "--dapo", "--answer-tokens", "3", "--draws", "20"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith(
        "coba-verl plan: M=16 prompts x n=4 = 64 rollouts a step, budgets in [2, 16], DAPO on"
    )
    assert "truth: posterior" in out and "coba: Beta(9.165, 1.835)" in out
    header = next(line for line in out.splitlines() if line.strip().startswith("uniform"))
    assert header.split() == ["uniform", "coba", "/", "uniform"]
    for label in (
        "B 4-7",
        "groups without reward spread",
        "rollouts generated per trained",
        "per trained token",
    ):
        assert label in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pass-rates", "0.2,0.4", "--prompts", "0", "--n", "4"], "prompts=0 must be >= 1"),
        (["--pass-rates", "0.2,0.4", "--prompts", "2", "--n", "200"], "n=200 lies outside"),
        (["--pass-rates", "0.2,1.4", "--prompts", "2", "--n", "4"], r"pass rate 1.4 \(position 1\)"),
        (["--pass-rates", "0.2,x", "--prompts", "2", "--n", "4"], "--pass-rates '0.2,x': give numbers"),
        (["--pass-rates", "uniform:0.5:0.1", "--prompts", "2", "--n", "4"], "a draw is uniform:LOW:HIGH"),
        (
            ["--prior-file", "no/such.jsonl", "--prompts", "2", "--n", "4"],
            "--prior-file='no/such.jsonl' does not",
        ),
        (["--pass-rates", "0.2,0.4", "--prompts", "2", "--n", "4", "--truth", "posterior"], "needs counts"),
        (
            ["--pass-rates", "0.2,0.4", "--prompts", "2", "--n", "4", "--failure-rate", "2"],
            "failure_rate=2.0",
        ),
    ],
)
def test_a_bad_input_is_one_line_naming_it_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coba-verl plan: ")
    assert re.search(message, err), err


def test_a_bad_prior_file_is_refused_by_the_trainers_reader(tmp_path, capsys):
    bad = tmp_path / "priors.jsonl"
    bad.write_text('{"index": 0, "successes": 9, "attempts": 8}\n')
    assert main(["--prior-file", str(bad), "--prompts", "1", "--n", "4"]) == 2
    assert "--prior-file: " in capsys.readouterr().err  # read_prior_file's own words, its name first


def test_a_uniform_draw_is_seeded():
    first, again = (
        parse_pass_rates("uniform:0.1:0.3:50", seed=1),
        parse_pass_rates("uniform:0.1:0.3:50", seed=1),
    )
    assert first.size == 50 and np.array_equal(first, again) and first.min() >= 0.1 and first.max() <= 0.3
    assert parse_pass_rates("uniform:0:1").size == 1024


def test_plan_needs_numpy_only():
    code = (
        "import sys; from coba_verl import cli; "
        "rc = cli.main(['plan', '--pass-rates', 'uniform:0:0.5:64', '--prompts', '16', '--n', '4', '--dapo', "
        "'--draws', '5']); "
        "print(rc, sorted(m for m in ('torch', 'scipy', 'verl', 'pandas') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 []", done.stderr[-2000:]


def _plan_text(capsys, *extra: str) -> str:
    assert main(["--prior-file", str(PRIORS), "--prompts", "16", "--n", "8", "--max-rollouts", "32",
                 "--draws", "5", "--steps", "4", *extra]) == 0  # fmt: skip
    return capsys.readouterr().out


def _per_trained(out: str) -> list[float]:
    line = next(line for line in out.splitlines() if "rollouts generated per trained" in line)
    return [float(v) for v in line.split()[-3:-1]]


def test_size_refills_auto_sizes_the_coba_row_only_under_dapo_as_verl_resolves_it(priors, capsys):
    auto = _plan_text(capsys, "--dapo")
    assert "waves sized to the rollouts missing: coba (size_refills)" in auto.splitlines()[0]
    kw = dict(prompts=16, n=8, max_rollouts=32, dapo=True, steps=4, draws=5, truth="posterior")
    uniform = plan_step_cost(priors, strategy="uniform", **kw).generated_per_trained
    sized = plan_step_cost(priors, strategy="coba", size_refills=True, **kw).generated_per_trained
    assert _per_trained(auto) == pytest.approx([round(uniform, 3), round(sized, 3)])
    both = _plan_text(capsys, "--dapo", "--size-refills")  # the bare flag: every row, as before
    assert "sized to the rollouts missing: uniform, coba" in both.splitlines()[0]
    plain = _plan_text(capsys, "--dapo", "--size-refills", "false")
    assert "sized" not in plain.splitlines()[0] and _per_trained(plain)[1] != _per_trained(auto)[1]
    assert "sized" not in _plan_text(capsys).splitlines()[0]  # auto without DAPO: no row sized


@pytest.mark.parametrize("strategy", ["knapsack", "static", "reverse", "coba_release"])
def test_size_refills_auto_sizes_no_row_of_another_strategy_and_true_sizes_both(capsys, strategy):
    """Only coba was measured with C-size: auto leaves the other strategies' rows unsized, as veRL."""
    auto = _plan_text(capsys, "--dapo", "--strategy", strategy)
    assert "sized" not in auto.splitlines()[0]
    both = _plan_text(capsys, "--dapo", "--strategy", strategy, "--size-refills", "true")
    assert f"waves sized to the rollouts missing: uniform, {strategy} (size_refills)" in both.splitlines()[0]
