"""The statistics of the summary: t-intervals, paired differences, AUC, rollouts to a target, regime."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from coba_verl.lab.report import format_regime, format_table, regime, summarise, t_interval


def _rows(label: str, seed: int, accs: list[float], budget: int, fails: list[float]) -> list[dict]:
    """Step rows of one run: evaluated at every step, 2 steps per epoch."""
    return [
        {
            "run": label,
            "seed": seed,
            "step": i + 1,
            "epoch": i // 2 + 1,
            "rollouts": budget * (i + 1),
            "total_budget": budget,
            "eval_acc": acc,
            "zero_grad_share": 0.5,
            "zero_grad_rollout_share": 0.25,
            "plugin_s": 0.01,
            "step_s": 1.0,
            "fail_rate": f,
            "alpha": math.nan,
            "beta": math.nan,
            "pass_hist": [1, 0, 1, 0, 0, 2],
        }  # fmt: skip
        for i, (acc, f) in enumerate(zip(accs, fails, strict=True))
    ]


def _folder(seeds=(0, 1, 2)) -> list[dict]:
    rows: list[dict] = []
    for s in seeds:
        rows.append({"run": "warm_start", "seed": s, "step": 0, "rollouts": 0, "eval_acc": 0.2})
        rows += _rows("uniform", s, [0.3, 0.4, 0.5, 0.6], 10, [0.7, 0.6, 0.5, 0.4])
        rows += _rows("coba", s, [0.3 + 0.01 * s, 0.5, 0.6, 0.6 + 0.02 * s], 10, [0.7, 0.6, 0.5, 0.4])
    return rows


def test_t_interval_matches_scipy_and_has_no_width_for_one_value() -> None:
    xs = [0.1, 0.3, 0.2, 0.5]
    lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=sum(xs) / 4, scale=stats.sem(xs))
    mean, half = t_interval(xs)
    assert mean == pytest.approx(0.275) and half == pytest.approx((hi - lo) / 2)
    assert t_interval([0.4]) == (0.4, pytest.approx(math.nan, nan_ok=True))


def test_paired_difference_auc_and_rollouts_to_reach_are_per_seed() -> None:
    summary = {s["run"]: s for s in summarise(_folder())}
    coba = summary["coba"]
    # final: 0.60, 0.62, 0.64 vs uniform 0.60 -> differences 0, 0.02, 0.04
    assert coba["d_final"][0] == pytest.approx(0.02)
    assert coba["d_final"][1] == pytest.approx(t_interval([0.0, 0.02, 0.04])[1])
    # uniform's curve (0, .2) (10, .3) (20, .4) (30, .5) (40, .6): trapezoid area 16 over 40 rollouts
    assert summary["uniform"]["auc"][0] == pytest.approx(0.4)
    assert coba["rollouts_to_ref"] == pytest.approx(30.0) and coba["rollouts_to_ref_reached"] == 3
    assert math.isnan(summary["uniform"]["d_final"][0])
    assert summary["uniform"]["zero_var_rollouts"] == 0.25 and summary["uniform"]["zero_var_groups"] == 0.5


def test_one_seed_prints_no_interval_and_several_print_one() -> None:
    one = format_table(summarise(_folder(seeds=(0,))))
    three = format_table(summarise(_folder()))
    assert "[" not in one
    assert "+0.020 [" in three


def test_regime_reports_start_and_end_failure_rates_and_histograms() -> None:
    reg = {g["run"]: g for g in regime(_folder())}
    assert reg["uniform"]["f_bar_start"] == pytest.approx(0.6)  # mean of the first 3 steps
    assert reg["uniform"]["f_bar_end"] == pytest.approx(0.5)
    assert reg["uniform"]["hist_start"] == pytest.approx([0.25, 0, 0.25, 0, 0, 0.5])
    assert reg["uniform"]["alpha"] is None
    assert "- (no Beta)" in format_regime(list(reg.values()))
