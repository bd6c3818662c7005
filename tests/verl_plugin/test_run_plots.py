"""`coba_verl.verl_plugin.reports.run_plots`: the run summary's picture and the docs' pictures draw the logged
metrics, and refuse a file that is not a coba-verl run's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.reports import run_plots, run_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _step(low: float, high: float, hist: dict[str, float], **extra: float) -> dict[str, float]:
    return {
        "coba/budget_min": low, "coba/budget_max": high, "coba/budget_mean": 4.0, "coba/budget_std": 1.0,
        **{f"coba/budget_hist/{k}": v for k, v in hist.items()}, **{f"coba/{k}": v for k, v in extra.items()},
    }  # fmt: skip


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows), encoding="utf-8")


#: Two training steps (the validation before training, step 0, logs no budgets).
METRICS = {
    0: {"val-core/coba_arithmetic/acc/mean@4": 0.1},
    1: _step(4, 4, {"2-3": 0, "4-7": 16, "8-16": 0}, all_fail_share=0.5, all_pass_share=0.125,
             rollouts_generated=96, trained_rollouts=64, alpha=9.0, beta=2.0, F_bar=0.875),
    2: _step(2, 16, {"2-3": 10, "4-7": 2, "8-16": 4}, all_fail_share=0.25, all_pass_share=0.0,
             rollouts_generated=64, trained_rollouts=64, alpha=6.0, beta=5.0, F_bar=0.625,
             expected_zero_var_share=0.3, expected_zero_var_share_uniform=0.45),
}  # fmt: skip


def _line(ax, label: str) -> np.ndarray:
    (line,) = [line for line in ax.get_lines() if line.get_label() == label]
    return np.asarray(line.get_ydata(), dtype=float)


def test_summary_picture_draws_each_steps_budgets_zero_variance_share_and_generated_against_trained():
    fig = run_plots.summary_figure(METRICS)
    budgets, zero, work = fig.axes
    assert _line(budgets, "min").tolist() == [4, 2] and _line(budgets, "max").tolist() == [4, 16]
    assert _line(budgets, "mean").tolist() == [4, 4]
    assert _line(zero, "observed").tolist() == [0.625, 0.25]  # all fail + all pass
    expected = _line(zero, "expected, these budgets")
    assert np.isnan(expected[0]) and expected[1] == 0.3  # a step that did not log it leaves a gap
    assert _line(zero, "expected, uniform budgets")[1] == 0.45
    assert _line(work, "generated").tolist() == [96, 64] and _line(work, "trained").tolist() == [64, 64]
    run_plots.plt.close(fig)


def test_budget_picture_stacks_the_prompts_per_budget_bin_and_draws_the_betas_mode():
    fig = run_plots.budget_figure(METRICS)
    hist, shape, weight = fig.axes
    tops = {}
    for patch in hist.patches:  # bars stacked per step: the highest top is the step's prompt count
        step = round(patch.get_x() + patch.get_width() / 2)
        tops[step] = max(tops.get(step, 0.0), patch.get_y() + patch.get_height())
    assert tops == {1: 16.0, 2: 16.0}
    labels = [t.get_text() for t in hist.get_legend().get_texts()]
    assert labels == ["B 2-3", "B 4-7", "B 8-16"]  # bins ordered by their lower edge
    # mode (alpha - 1) / (alpha + beta - 2): (9 - 1) / 9 and (6 - 1) / 9
    assert _line(shape, "Beta mode (pass rate favoured)") == pytest.approx([8 / 9, 5 / 9])
    assert _line(shape, "F̄ (failure rate, after the step)").tolist() == [0.875, 0.625]
    curves = weight.get_lines()
    assert [c.get_label() for c in curves] == ["step 1: α 9.00, β 2.00", "step 2: α 6.00, β 5.00"]
    p = np.asarray(curves[1].get_xdata())
    peak = p[np.argmax(curves[1].get_ydata())]
    assert peak == pytest.approx(5 / 9, abs=0.01)  # the density drawn peaks at the mode
    run_plots.plt.close(fig)


def test_generated_picture_draws_generated_per_trained_rollout_and_the_pooled_ratio(tmp_path):
    other = {1: _step(2, 8, {"2-3": 8, "4-7": 8}, rollouts_generated=80, trained_rollouts=64)}
    fig = run_plots.generated_figure({"coba": [METRICS], "uniform": [other, other]})
    (ax,) = fig.axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["coba: 1.25 overall", "uniform: 1.25 overall, 2 seeds"]  # 160 / 128; 160 / 128
    assert _line(ax, legend[0]).tolist() == [1.5, 1.0]  # 96 / 64, 64 / 64
    run_plots.plt.close(fig)


def test_run_summary_png_writes_the_picture_beside_the_text_and_names_it(tmp_path, capsys):
    metrics, png = tmp_path / "metrics.jsonl", tmp_path / "summary.png"
    _write(metrics, sorted(METRICS.items()))
    assert run_summary.main([str(metrics), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert capsys.readouterr().out.splitlines()[-1] == f"picture: {png}"


def test_pictures_refuse_metrics_without_coba_budgets_naming_the_file(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    _write(metrics, [(1, {"timing_s/step": 2.0})])
    with pytest.raises(CobaRefusal, match=r"metrics\.jsonl: no step logged coba/budget_min"):
        run_plots.main(["budgets", str(metrics), "--out", str(tmp_path / "b.png")])
    assert not (tmp_path / "b.png").exists()


def test_generated_picture_refuses_a_run_given_without_its_label(tmp_path):
    with pytest.raises(CobaRefusal, match=r"--run 'runs/metrics.jsonl': give LABEL=FILE"):
        run_plots.main(["generated", "--run", "runs/metrics.jsonl", "--out", str(tmp_path / "g.png")])


def test_budget_picture_draws_one_beta_curve_for_steps_that_used_the_same_shape():
    same = {s: {**METRICS[1], "coba/alpha": 8.97, "coba/beta": 2.03} for s in (1, 2, 3)}
    fig = run_plots.budget_figure(same)
    (curve,) = fig.axes[2].get_lines()
    assert curve.get_label() == "steps 1, 2, 3: α 8.97, β 2.03"
    run_plots.plt.close(fig)
