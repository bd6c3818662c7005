"""The summary's statistics (t-intervals, paired differences, AUC, rollouts to a target, regime), its
text, and what its plots say with one seed."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
from matplotlib.collections import PolyCollection
from scipy import stats

from coba_verl.lab.plots import figures, plot_fail_rate
from coba_verl.lab.report import (
    LEGEND,
    format_regime,
    format_summary,
    format_table,
    regime,
    summarise,
    t_interval,
)


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
            "fail_rate_avg3": f,
            "alpha": math.nan,
            "beta": math.nan,
            "pass_hist": [1, 0, 1, 0, 0, 2],
        }  # fmt: skip
        for i, (acc, f) in enumerate(zip(accs, fails, strict=True))
    ]


def _folder(seeds=(0, 1, 2), half: bool = False) -> list[dict]:
    """Warm start, uniform and coba per seed (and uniform@0.5 when ``half``)."""
    rows: list[dict] = []
    for s in seeds:
        rows.append({"run": "warm_start", "seed": s, "step": 0, "rollouts": 0, "eval_acc": 0.2})
        rows += _rows("uniform", s, [0.3, 0.4, 0.5, 0.6], 10, [0.7, 0.6, 0.5, 0.4])
        rows += _rows("coba", s, [0.3 + 0.01 * s, 0.5, 0.6, 0.6 + 0.02 * s], 10, [0.7, 0.6, 0.5, 0.4])
        if half:
            rows += _rows("uniform@0.5", s, [0.3, 0.35, 0.4, 0.45], 5, [0.7, 0.6, 0.5, 0.4])
    return rows


def _snaps(runs=("uniform", "coba")) -> list[dict]:
    """Two snapshot steps of seed 0 in which every run gives the same prompts the same budget."""
    return [
        {"run": r, "seed": 0, "step": st, "pass_rates": [0.0, 0.0, 0.5, 1.0], "budgets": [2, 2, 4, 2]}
        for st in (3, 4)
        for r in runs
    ]


@pytest.fixture
def one_seed_figures():
    figs = figures(_folder(seeds=(0,)), _snaps(), k=1)
    yield figs
    for fig in figs.values():
        plt.close(fig)


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


def test_column_names_agree_between_table_and_legend() -> None:
    """Every column of the comparison table is explained in the legend under the header's own name."""
    header = format_table(summarise(_folder())).splitlines()[0]
    names = [h.strip() for h in header.strip("|").split("|")][1:]  # "run" needs no entry
    assert "rollouts to uniform's final" in names
    entries = [line[4:].split("  ")[0] for line in LEGEND.splitlines() if line.startswith("    ")]
    assert set(names) <= set(entries), set(names) - set(entries)
    assert "to uniform" not in entries


def test_one_seed_summary_says_what_one_seed_shows_above_the_tables() -> None:
    text = format_summary(summarise(_folder(seeds=(0,))), regime(_folder(seeds=(0,))))
    head, tables = text.split("Comparison:", 1)
    assert "One seed" in head and "single paired difference" in head and "no interval" in head
    assert "--seeds" in head
    assert LEGEND in head and "Regime:" in tables  # all prose above, both tables below
    assert "intervals below" not in text and "[" not in tables
    three = format_summary(summarise(_folder()), regime(_folder()))
    assert three.index("95 % t-interval over the seeds") < three.index("| run |")
    assert "+0.020 [" in three


def test_one_seed_paired_plot_has_no_band_and_says_n_1(one_seed_figures) -> None:
    ax = one_seed_figures["accuracy_vs_rollouts.png"].axes[1]
    assert "n = 1" in ax.get_title() and "no interval" in ax.get_title() and "--seeds" in ax.get_title()
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    figs = figures(_folder(), _snaps(), k=1)
    ax = figs["accuracy_vs_rollouts.png"].axes[1]
    assert "n = 3 seeds" in ax.get_title() and "95 %" in ax.get_title()
    assert [c for c in ax.collections if isinstance(c, PolyCollection)]
    for fig in figs.values():
        plt.close(fig)


def test_f_bar_half_explanation_lies_outside_the_data_area() -> None:
    fig, ax = plt.subplots()
    plot_fail_rate(ax, _folder(seeds=(0,)), {"uniform": "C0", "coba": "C1"})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    data_area = ax.get_window_extent(renderer)
    texts = [t for t in fig.findobj(plt.Text) if "explo" in t.get_text() and t.get_visible()]
    assert texts and not ax.texts  # nothing written inside the axes
    for t in texts:
        assert not t.get_window_extent(renderer).overlaps(data_area), t.get_text()
    assert "F̄ = 0.5" in ax.get_legend_handles_labels()[1]
    plt.close(fig)


def test_regime_lower_panels_say_what_they_show_and_repeat_no_curve(one_seed_figures) -> None:
    limited, hist = one_seed_figures["regime.png"].axes[2:4]
    assert not limited.lines  # no uniform@0.5 run: a note, not uniform's accuracy curve again
    note = " ".join(t.get_text() for t in limited.texts)
    assert "uniform@0.5" in note and "--runs" in note
    assert "training prompts" in hist.get_title() and "first vs last epoch" in hist.get_title()
    figs = figures(_folder(seeds=(0,), half=True), _snaps(), k=1)
    limited = figs["regime.png"].axes[2]
    assert [ln.get_label() for ln in limited.lines] == ["uniform", "uniform@0.5"]
    assert "uniform vs uniform@0.5" in limited.get_title() and limited.get_xlabel() == "step"
    for fig in figs.values():
        plt.close(fig)


def test_budget_plot_keeps_equal_points_apart_and_has_one_legend_for_all_panels(one_seed_figures) -> None:
    fig = one_seed_figures["budget_vs_pass_rate.png"]
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["uniform", "coba"]
    for ax in fig.axes:
        uniform, coba = ax.collections  # the same (p̂, B) points of both runs
        assert uniform.get_alpha() < 1 and not uniform.get_facecolor().any()  # hollow
        assert (uniform.get_offsets()[:, 0] != coba.get_offsets()[:, 0]).all()  # dodged
    overview_budgets = one_seed_figures["overview.png"].axes[3]
    assert [t.get_text() for t in overview_budgets.get_legend().get_texts()] == ["uniform", "coba"]


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
