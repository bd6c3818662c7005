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
    assert lines[4] == (
        f"held-out accuracy ({VAL}): 0.100 before training, 0.200 after step 2; change +0.100 "
        "(no standard error: held-out prompts not known, --val-files)"
    )
    assert lines[5] == (
        "training prompts' mean score held: 0.250 over step 1, 0.250 over step 2 (other prompts each "
        "step; all-fail groups 8 of 16 observed, then 4 of 16)"
    )
    assert lines[6].startswith("time logged by veRL: 2 steps 5.0 s (median 2.50 s)")
    assert lines[7:] == [f"metrics: {metrics}", "checkpoints: ck"]


def test_summary_of_a_run_without_coba_metrics_says_so(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    _write(metrics, [(1, {"timing_s/step": 2.0})])
    assert run_summary.main([str(metrics)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("no step logged coba-verl's budgets")
    assert out[1] == "held-out accuracy: not measured (no validation logged)"
    assert len(out) == 4  # no training-score line without scores: time, metrics


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


ACC = "val-core/coba_arithmetic/acc/mean@4"


def _falling_run(tmp_path):
    """The quick start's falling run, by hand: held-out 38/256 -> 26/256 (64 prompts x 4 samples) and
    the training prompts' mean score down from steps 1-4 to steps 13-16."""
    scores = [0.132, 0.078, 0.105, 0.057, 0.127, 0.116, 0.199, 0.143,
              0.140, 0.073, 0.191, 0.078, 0.074, 0.027, 0.016, 0.184]  # fmt: skip
    fails = [12, 12, 11, 12, 11, 11, 6, 10, 10, 13, 10, 13, 13, 14, 14, 7]
    rows = [(0, {ACC: 38 / 256, "val-core/coba_arithmetic/acc/best@4/mean": 0.345})]
    for step, (score, fail) in enumerate(zip(scores, fails, strict=True), start=1):
        m = _step(2, 16, {"2-3": 10, "4-7": 2, "8-16": 4}, fail=fail / 16, passed=0.0)
        rows.append((step, {**m, "coba/prompt_mean_score": score}))
    rows.append((8, {ACC: 35 / 256}))
    rows.append((16, {ACC: 26 / 256}))
    metrics = tmp_path / "metrics.jsonl"
    _write(metrics, rows)
    return metrics


def test_held_out_line_gives_the_change_its_binomial_standard_error_and_a_verdict(tmp_path):
    metrics = run_summary.read_metrics(_falling_run(tmp_path))
    lines = run_summary.summary_lines(metrics, held_out_prompts=64)
    (held_out,) = [line for line in lines if line.startswith("held-out")]
    # SE = sqrt((38/256 * 218/256 + 26/256 * 230/256) / 256) = 0.02916; 2 SE = 0.0583 > 0.0469
    assert held_out == (
        f"held-out accuracy ({ACC}): 0.148 before training, 0.137 after step 8, 0.102 after step 16; "
        "change -0.047, standard error 0.029 (binomial, 64 prompts x 4 samples each time): within noise "
        "(under 2 standard errors, 0.058)"
    )
    change = run_summary.held_out_change(metrics, 64)
    assert (change.first_step, change.last_step, change.samples, change.prompts) == (0, 16, 4, 64)
    assert change.change == -12 / 256
    assert abs(change.standard_error - 0.029158) < 1e-6
    # training prompts: steps 1-4 (0.132 + 0.078 + 0.105 + 0.057) / 4 = 0.093, steps 13-16 0.07525
    assert lines[lines.index(held_out) + 1] == (
        "training prompts' mean score fell too: 0.093 over steps 1-4, 0.075 over steps 13-16 (other "
        "prompts each step; all-fail groups 47 of 64 observed, then 48 of 64)"
    )


def test_the_verdict_turns_on_the_number_of_answers_behind_each_validation():
    """+19/256 (0.141 -> 0.215) is 2.21 binomial SEs at 64 prompts x 4 samples, 1.10 at 16 prompts;
    -21/256 (0.141 -> 0.059) is 3.13 SEs; 0.25 -> 0.375 at 32 x 8 is 3.08."""

    def change(first: float, last: float, prompts: int | None, k: int = 4) -> run_summary.HeldOutChange:
        metric = f"val-core/coba_arithmetic/acc/mean@{k}"
        return run_summary.held_out_change({0: {metric: first}, 16: {metric: last}}, prompts)

    rose = change(36 / 256, 55 / 256, 64)
    assert (rose.verdict, round(rose.standard_error, 5)) == ("rose beyond noise", 0.03363)
    assert rose.text() == (
        "change +0.074, standard error 0.034 (binomial, 64 prompts x 4 samples each time): rose beyond "
        "noise (over 2 standard errors, 0.067)"
    )
    assert change(36 / 256, 55 / 256, 16).verdict == "within noise"
    fell = change(36 / 256, 15 / 256, 64)
    assert (fell.verdict, round(fell.standard_error, 5)) == ("fell beyond noise", 0.02622)
    eight = change(0.25, 0.375, 32, k=8)
    assert (eight.samples, eight.verdict, round(eight.standard_error, 5)) == (8, "rose beyond noise", 0.04059)
    assert change(36 / 256, 55 / 256, None).standard_error is None
    assert change(0.5, 3.0, 64).text() == "change +2.500 (no standard error: scores not 0-1)"
    assert run_summary.held_out_change({0: {ACC: 0.1}}, 64) is None  # one validation: no change


def test_training_scores_that_rose_while_held_out_fell_are_not_said_to_have_moved_too(tmp_path):
    steps = run_summary.step_summaries(run_summary.read_metrics(_falling_run(tmp_path)))
    assert run_summary.training_score_line(steps, +0.05).startswith(
        "training prompts' mean score fell: 0.093 over steps 1-4, 0.075 over steps 13-16"
    )
    rising = [*reversed(steps)]  # the same steps the other way round: 0.075 first, 0.093 last
    assert run_summary.training_score_line(rising, -0.05).startswith(
        "training prompts' mean score rose: 0.075"
    )
    assert run_summary.training_score_line(rising, +0.05).startswith("training prompts' mean score rose too:")
    assert run_summary.training_score_line(steps[:1]) is None


def test_val_files_give_the_held_out_prompts_counted_from_the_parquet(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    val = tmp_path / "test.parquet"
    pq.write_table(pa.table({"prompt": [f"{i}+1=" for i in range(64)]}), val)
    assert run_summary.main([str(_falling_run(tmp_path)), "--val-files", str(val)]) == 0
    out = capsys.readouterr().out
    assert (
        "change -0.047, standard error 0.029 (binomial, 64 prompts x 4 samples each time): within noise"
        in out
    )
    assert run_summary.main([str(_falling_run(tmp_path)), "--val-files", str(val), str(val)]) == 0
    assert "standard error 0.021 (binomial, 128 prompts x 4 samples each time)" in capsys.readouterr().out
