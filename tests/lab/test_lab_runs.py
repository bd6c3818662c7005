"""Run folders, exact budgets, determinism, Ctrl-C and the command line, on tiny sizes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import coba_verl.lab.experiment as experiment
from coba_verl.lab.cli import main
from coba_verl.lab.config import LabConfig, parse_run_label
from coba_verl.lab.experiment import read_metrics, run_lab
from coba_verl.lab.plots import PLOT_FILES
from coba_verl.lab.scenarios import SCENARIOS

TINY = {
    "hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "warm_steps": 3, "warm_batch_size": 16,
    "n_train": 48, "n_eval": 16, "prompts_per_step": 8, "rollouts_per_prompt": 4, "eval_every": 6,
    "eval_samples": 1, "snapshot_steps": 2,
}  # fmt: skip
TIMING = {"gen_s", "update_s", "plugin_s", "step_s"}
#: Row values that are lists (pass-rate bin counts), compared exactly.
HISTOGRAMS = {"pass_hist", "trained_pass_hist"}


def _tiny(**kw) -> LabConfig:
    return LabConfig(**{**TINY, **kw})


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory: pytest.TempPathFactory):
    cfg = _tiny(runs=["uniform", "knapsack", "coba", "coba_release", "coba@0.5"], seeds=[0, 1], steps=14)
    out = tmp_path_factory.mktemp("lab") / "run"
    return cfg, run_lab(cfg, out, cache_dir=None, progress=False)


def test_run_folder_holds_metrics_config_summary_and_plots(lab_run) -> None:
    cfg, outcome = lab_run
    folder = outcome.folder
    assert outcome.status == "finished"
    for name in ("config.json", "config.yaml", "metrics.jsonl", "metrics.csv", "snapshots.jsonl",
                 "warmstart.json", "summary.txt", "summary.json"):  # fmt: skip
        assert (folder / name).stat().st_size > 0, name
    for name in PLOT_FILES:
        assert (folder / "plots" / name).read_bytes()[:4] == b"\x89PNG", name
    config = json.loads((folder / "config.json").read_text())
    assert config["status"] == "finished" and config["lab"]["runs"] == cfg.runs
    assert yaml.safe_load((folder / "config.yaml").read_text())["lab"] == config["lab"]
    rows = read_metrics(folder)
    assert len(rows) == len(cfg.seeds) * (1 + len(cfg.runs) * cfg.steps)  # + one warm-start row per seed
    with open(folder / "metrics.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    summary = json.loads((folder / "summary.json").read_text())
    assert [s["run"] for s in summary["runs"]] == cfg.runs
    table = (folder / "summary.txt").read_text()
    assert all(label in table for label in cfg.runs)


def test_every_strategy_spends_exactly_its_budget_each_step(lab_run) -> None:
    cfg, outcome = lab_run
    rows = [r for r in read_metrics(outcome.folder) if r["step"] > 0]
    for r in rows:
        total = cfg.budget(parse_run_label(r["run"]))
        assert r["total_budget"] == total
        assert r["rollouts"] == r["step"] * total
        assert 2 <= r["budget_min"] <= r["budget_max"]
    snaps = [json.loads(line) for line in (outcome.folder / "snapshots.jsonl").read_text().splitlines()]
    assert snaps
    for s in snaps:
        assert sum(s["budgets"]) == cfg.budget(parse_run_label(s["run"]))
        assert len(s["budgets"]) == len(s["pass_rates"]) == cfg.prompts_per_step


def test_same_seed_reproduces_every_metric_except_timings(lab_run, tmp_path: Path) -> None:
    cfg = _tiny(runs=["coba"], seeds=[1], steps=14)
    outcome = run_lab(cfg, tmp_path / "again", cache_dir=None, progress=False)
    again = [r for r in read_metrics(outcome.folder)]
    first = [
        r for r in read_metrics(lab_run[1].folder) if r["seed"] == 1 and r["run"] in ("coba", "warm_start")
    ]
    assert len(again) == len(first)
    for a, b in zip(again, first, strict=True):
        assert [a.get(k) for k in HISTOGRAMS] == [b.get(k) for k in HISTOGRAMS]
        keys = set(a) - TIMING - HISTOGRAMS
        assert {k: a[k] for k in keys} == pytest.approx({k: b[k] for k in keys}, nan_ok=True)


def test_warm_start_cache_gives_the_same_weights(tmp_path: Path) -> None:
    cfg = _tiny(runs=["uniform"], steps=2, eval_every=2)
    a = run_lab(cfg, tmp_path / "a", cache_dir=tmp_path / "cache", progress=False)
    b = run_lab(cfg, tmp_path / "b", cache_dir=tmp_path / "cache", progress=False)
    warm = [json.loads((o.folder / "warmstart.json").read_text())["0"] for o in (a, b)]
    assert [w["cached"] for w in warm] == [False, True]
    assert warm[0]["eval_acc"] == warm[1]["eval_acc"]
    rows_a, rows_b = read_metrics(a.folder), read_metrics(b.folder)
    assert len(rows_a) == len(rows_b)
    for x, y in zip(rows_a, rows_b, strict=True):
        assert [x.get(k) for k in HISTOGRAMS] == [y.get(k) for k in HISTOGRAMS]
        keys = set(x) - TIMING - HISTOGRAMS
        assert {k: x[k] for k in keys} == pytest.approx({k: y[k] for k in keys}, nan_ok=True)


def test_ctrl_c_leaves_a_valid_partial_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = experiment.train_run

    def interrupted(cfg, ctx, spec, sink, **kw):
        def sink_then_stop(row):
            sink(row)
            if row["step"] == 3:
                raise KeyboardInterrupt

        return real(cfg, ctx, spec, sink_then_stop, **kw)

    monkeypatch.setattr(experiment, "train_run", interrupted)
    cfg = _tiny(runs=["uniform", "coba"], steps=8)
    outcome = run_lab(cfg, tmp_path / "partial", cache_dir=None, progress=False)
    assert outcome.status == "interrupted"
    assert json.loads((outcome.folder / "config.json").read_text())["status"] == "interrupted"
    rows = read_metrics(outcome.folder)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert "uniform" in (outcome.folder / "summary.txt").read_text()
    for name in PLOT_FILES:
        assert (outcome.folder / "plots" / name).exists(), name


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs", "uniform,bogus"], "strategy 'bogus' is unknown"),
        (["--runs", "bogus@0.5"], "strategy 'bogus' (in 'bogus@0.5') is unknown"),
        (["--runs", "coba@1.5"], "budget scale '1.5' in 'coba@1.5' must be a number in (0, 1]"),
        (["--runs", "coba@-1"], "budget scale '-1' in 'coba@-1' must be a number in (0, 1]"),
        (["--runs", "coba@half"], "budget scale 'half' in 'coba@half'"),
        (["--seeds", "0,x"], "'0,x' is not a valid value"),
        (["--steps", "0"], "steps=0 must be a positive integer"),
        (["--steps", "x"], "'x' is not a valid value"),
        (["--coba", "kapa=7"], "'kapa=7' is not KEY=VALUE"),
        (["--coba", "cut_sessions=spread"], "'cut_sessions=spread' is not KEY=VALUE"),  # --dapo-cut
        (["--coba", "size_refills=true"], "'size_refills=true' is not KEY=VALUE"),  # the run option +size
        (["--coba", "kappa=abc"], "kappa must be a number"),
        (["--scenario", "nope"], "invalid choice: 'nope'"),
        (["--levels", "2/1"], "level '2/1' is not <digits><op><digits>"),
        (["--warm-levels", "3*3"], "warm_levels ['3*3'] are not in levels"),
        (["--device", "tpu"], "device='tpu' is not a torch device"),
        (["--coba", "kappa=1"], "coba.kappa=1.0 must be > 2"),
        (["--rollouts-per-prompt", "1"], "rollouts per step=32 is infeasible"),
        (["--runs", "coba,coba"], "repeats a strategy"),
    ],
)
def test_bad_arguments_exit_2_with_a_message_naming_the_value(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_command_line_run_prints_the_summary_table(tmp_path: Path, capsys) -> None:
    argv = "--runs uniform,coba --steps 3 --n-train 32 --n-eval 8 --prompts-per-step 8"
    argv += " --rollouts-per-prompt 4 --eval-every 3 --eval-samples 1 --warm-steps 2"
    argv += " --no-cache -q"  # no --no-progress: captured stderr is no terminal, so no bar
    argv = [*argv.split(), "--out", str(tmp_path / "cli")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "final acc" in out and "Δ final vs uniform" in out and "F̄ start" in out and "coba" in out
    prose, tables = out.split("Comparison:", 1)
    assert "One seed" in prose and "--seeds" in prose  # what one seed shows, above the tables
    assert "[" not in tables.split("Regime:")[0]  # one seed: no interval
    assert "step/s" not in captured.err and "s/step" not in captured.err  # no progress bar
    assert (tmp_path / "cli" / "summary.txt").read_text() == out.split("\nfinished in")[0].rstrip() + "\n"
    np.testing.assert_equal(json.loads((tmp_path / "cli" / "config.json").read_text())["status"], "finished")


@pytest.mark.parametrize(
    ("flag", "tty", "shown"),
    [([], False, False), ([], True, True), (["--progress"], False, True), (["--no-progress"], True, False)],
)
def test_progress_bar_defaults_to_whether_stderr_is_a_terminal(
    flag: list[str], tty: bool, shown: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}

    def fake_run_lab(cfg, out, *, cache_dir=None, progress=True):
        seen["progress"] = progress
        return experiment.LabOutcome(Path(out), [], [], "(no step ran)", "finished", 0.0, 0.0)

    class Stderr:
        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return tty

    monkeypatch.setattr(experiment, "run_lab", fake_run_lab)
    monkeypatch.setattr("sys.stderr", Stderr())
    assert main([*flag, "-q", "--out", str(tmp_path / "x")]) == 0
    assert seen["progress"] is shown


def test_help_shows_defaults_as_typed_values_not_python_lists(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "[default uniform,knapsack,coba]" in text
    assert "['" not in text and "{'" not in text


def test_device_cuda_without_a_gpu_stops_before_any_work(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(["--device", "cuda"])
    assert exc.value.code == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


def test_scenario_flags_override_the_preset_and_the_preset_fills_the_rest() -> None:
    from coba_verl.lab.cli import build_parser, config_from_args

    for name in SCENARIOS:
        args = build_parser().parse_args(["--scenario", name, "--steps", "7", "--coba", "kappa=7"])
        cfg = config_from_args(args)
        preset = LabConfig.from_scenario(name)
        assert cfg.scenario == name and cfg.steps == 7 and cfg.coba == {**preset.coba, "kappa": 7.0}
        assert (cfg.n_train, cfg.levels, cfg.lr) == (preset.n_train, preset.levels, preset.lr)
    with pytest.raises(ValueError, match="scenario 'x' is unknown"):
        LabConfig.from_scenario("x")
