"""`coba_verl.verl_plugin.reports.run_summary`: the quick start's summary, read from veRL's file logger."""

from __future__ import annotations

import json

from coba_verl.verl_plugin.reports import run_summary

VAL = "val-core/coba_arithmetic/reward/mean@4"


def _step(budget_min: float, budget_max: float, hist: dict[str, float], fail: float, passed: float) -> dict:
    return {
        "coba/budget_min": budget_min, "coba/budget_max": budget_max, "coba/budget_mean": 4.0,
        "coba/budget_std": 0.0 if budget_min == budget_max else 4.6,
        **{f"coba/budget_hist/{k}": v for k, v in hist.items()},
        "coba/all_fail_share": fail, "coba/all_pass_share": passed, "coba/prompts": 16.0,
        "coba/prompt_mean_score": 0.25,
        "coba/expected_zero_var_share": 0.5, "coba/expected_zero_var_share_uniform": 0.75,
        "timing_s/step": 2.5,
    }  # fmt: skip


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows), encoding="utf-8")


def test_summary_counts_zero_variance_groups_and_non_uniform_steps(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    _write(
        metrics,
        [
            (0, {VAL: 0.10}),
            (1, _step(4, 4, {"2-3": 0, "4-7": 16, "8-16": 0}, fail=0.5, passed=0.125)),
            (2, _step(2, 16, {"2-3": 10, "4-7": 2, "8-16": 4}, fail=0.25, passed=0.0)),
            (2, {VAL: 0.20}),  # validation logged apart, same step
        ],
    )
    lines = run_summary.summary_lines(
        run_summary.read_metrics(metrics), metrics_file=metrics, checkpoints="ck"
    )
    assert lines[0].startswith("step   1: B 4-4 (mean 4.0, std 0.0) uniform; zero-variance groups 10/16 obs")
    assert "(8 all fail, 2 all pass)" in lines[0]
    assert lines[1].startswith("step   2: B 2-16 (mean 4.0, std 4.6); zero-variance groups 4/16 observed")
    assert lines[2] == (
        "budgets differ from uniform in 1 of 2 steps; zero-variance groups 14 of 32 observed (44 %)"
    )
    assert lines[3].endswith("2 steps): 0.500 with these budgets, 0.750 with 4 rollouts each")
    assert lines[4] == f"held-out accuracy ({VAL}): 0.100 before training, 0.200 after step 2"
    assert lines[5].startswith("time logged by veRL: 2 steps 5.0 s (median 2.50 s)")
    assert lines[6:] == [f"metrics: {metrics}", "checkpoints: ck"]


def test_summary_of_a_run_without_coba_metrics_says_so(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    _write(metrics, [(1, {"timing_s/step": 2.0})])
    assert run_summary.main([str(metrics)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("no step logged coba-verl's budgets")
    assert out[1] == "held-out accuracy: not measured (no validation logged)"


def test_zero_variance_groups_are_counted_over_the_observed_groups_not_the_allocated_prompts(tmp_path):
    """Under DAPO the tracker observes more groups than a round allocates (evicted groups and refills):
    the all-fail / all-pass shares are over ``coba/prompts``, the groups observed."""
    metrics = tmp_path / "metrics.jsonl"
    step = _step(2, 16, {"2-3": 10, "4-7": 2, "8-16": 4}, fail=0.5, passed=0.125)  # 16 allocated
    _write(metrics, [(1, {**step, "coba/prompts": 24.0})])  # 24 observed
    (summary,) = run_summary.step_summaries(run_summary.read_metrics(metrics))
    assert (summary.prompts, summary.observed, summary.all_fail, summary.all_pass) == (16, 24, 12, 3)
    lines = run_summary.summary_lines(run_summary.read_metrics(metrics))
    assert "zero-variance groups 15/24 observed (12 all fail, 3 all pass)" in lines[0]
    assert lines[1] == (
        "budgets differ from uniform in 1 of 1 steps; zero-variance groups 15 of 24 observed (62 %)"
    )


def test_time_line_sums_veRLs_step_validation_and_checkpoint_times(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    steps = [(s, {**_step(4, 4, {"4-7": 16}, fail=0.0, passed=0.0), "timing_s/step": t}) for s, t in
             [(1, 3.0), (2, 1.0), (3, 2.0), (4, 10.0)]]  # fmt: skip
    checks = [(2, {"timing_s/testing": 4.5}), (4, {"timing_s/testing": 5.5, "timing_s/save_checkpoint": 0.5})]
    _write(metrics, [*steps, *checks])
    line = run_summary.time_line(run_summary.read_metrics(metrics))
    # 3 + 1 + 2 + 10 = 16 s; median of 1, 2, 3, 10 = 2.5; validations 4.5 + 5.5 = 10
    assert line == (
        "time logged by veRL: 4 steps 16.0 s (median 2.50 s), validations after a step 10.0 s, "
        "checkpoints 0.5 s"
    )
    assert run_summary.time_line({1: {"coba/budget_min": 4.0}}) is None
