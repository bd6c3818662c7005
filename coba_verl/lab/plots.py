"""PNG plots of a lab run folder (matplotlib, Agg backend; nothing is shown on screen).

accuracy_vs_rollouts.png   held-out avg@k vs training rollouts spent, mean ± std over seeds
budget_vs_pass_rate.png    B_i against p_hat_i at a few steps, per strategy (cf. paper Fig. 4)
alpha.png                  alpha_t and beta_t of the capability Beta over training (spec §3)
zero_grad.png              share of groups (and of rollouts) with no GRPO signal
overview.png               the four panels together
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

__all__ = ["PLOT_FILES", "write_plots"]

PLOT_FILES = (
    "accuracy_vs_rollouts.png",
    "budget_vs_pass_rate.png",
    "alpha.png",
    "zero_grad.png",
    "overview.png",
)


def _colors(labels: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {lb: cmap(i % 10) for i, lb in enumerate(labels)}


def _labels(rows: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for r in rows:
        if r["step"] > 0 and r["run"] not in out:
            out.append(r["run"])
    return out


def _series(rows: list[dict[str, Any]], label: str, key: str) -> dict[int, list[tuple[float, float]]]:
    """seed -> [(step, value)] for one run label."""
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["run"] == label and r["step"] > 0:
            out[r["seed"]].append((r["step"], float(r[key])))
    return out


def _smooth(y: np.ndarray, w: int) -> np.ndarray:
    if y.size < 2 or w <= 1:
        return y
    w = min(w, y.size)
    c = np.cumsum(np.r_[0.0, y])
    out = np.empty_like(y)
    for i in range(y.size):
        lo = max(0, i - w + 1)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def _eval_curves(rows: list[dict[str, Any]], label: str) -> dict[int, dict[int, float]]:
    """seed -> {rollouts: held-out accuracy} of one run label, including the warm start at 0."""
    start = {r["seed"]: r["eval_acc"] for r in rows if r["step"] == 0}
    per_seed: dict[int, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["run"] == label and r["step"] > 0 and not math.isnan(r["eval_acc"]):
            per_seed[r["seed"]][r["rollouts"]] = r["eval_acc"]
    for s in per_seed:
        if s in start:
            per_seed[s][0] = start[s]
    return per_seed


def plot_accuracy(ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any]) -> None:
    n = 0  # seeds behind the curves; none when every run was interrupted before its first evaluation
    for label, color in colors.items():
        per_seed = _eval_curves(rows, label)
        if not per_seed:
            continue
        xs = sorted(set.intersection(*(set(d) for d in per_seed.values())))
        ys = np.array([[d[x] for x in xs] for d in per_seed.values()])  # (seeds, points)
        n = ys.shape[0]
        ax.plot(xs, ys.mean(0), "-o", ms=3, color=color, label=label)
    ax.set_xlabel("training rollouts spent")
    ax.set_ylabel("held-out accuracy (avg@k, T=1)")
    ax.set_title("Held-out accuracy vs rollouts" + (f" (mean of {n} seeds)" if colors and n > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_paired_gain(ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], reference: str) -> bool:
    """Accuracy minus the reference run's at the same step and seed (the runs share warm start,
    prompts and evaluation noise, so this difference is far less noisy than either curve)."""
    ref = _eval_curves(rows, reference)
    ref_budget = next((r["total_budget"] for r in rows if r["run"] == reference and r["step"] > 0), None)
    if not ref or ref_budget is None:
        return False
    for label, color in colors.items():
        if label == reference:
            continue
        cur = _eval_curves(rows, label)
        budget = next((r["total_budget"] for r in rows if r["run"] == label and r["step"] > 0), ref_budget)
        diffs: dict[int, list[float]] = defaultdict(list)
        for s, pts in cur.items():
            for x, acc in pts.items():
                x_ref = x // budget * ref_budget  # same step of the reference run
                if s in ref and x_ref in ref[s]:
                    diffs[x].append(acc - ref[s][x_ref])
        xs = sorted(diffs)
        if not xs:
            continue
        mean = np.array([np.mean(diffs[x]) for x in xs])
        ax.plot(xs, mean, "-o", ms=3, color=color, label=label)
        if min(len(diffs[x]) for x in xs) > 1:
            sd = np.array([np.std(diffs[x], ddof=1) for x in xs])
            ax.fill_between(xs, mean - sd, mean + sd, color=color, alpha=0.15)
    ax.axhline(0.0, color=colors.get(reference, "k"), lw=1, ls="--", label=reference)
    ax.set_xlabel("training rollouts spent")
    ax.set_ylabel(f"accuracy minus {reference}'s at the same step")
    ax.set_title(f"Paired difference to {reference} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return True


def plot_alpha(ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any]) -> None:
    for label, color in colors.items():
        if label.split("@")[0] in ("uniform", "knapsack", "static"):
            continue  # alpha_t does not drive these strategies
        for i, (_, pts) in enumerate(sorted(_series(rows, label, "alpha").items())):
            x, a = np.array(pts).T
            _, b = np.array(sorted(_series(rows, label, "beta").items())[i][1]).T
            ax.plot(x, _smooth(a, 10), color=color, lw=1.2, label=f"{label} α" if i == 0 else None)
            ax.plot(x, _smooth(b, 10), color=color, lw=1.0, ls="--", label=f"{label} β" if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("Beta shape (10-step mean)")
    ax.set_title("α_t (solid), β_t (dashed): exploit → explore")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def plot_zero_grad(
    ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], key: str, title: str
) -> None:
    for label, color in colors.items():
        ys = [np.array(pts)[:, 1] for _, pts in sorted(_series(rows, label, key).items())]
        if not ys:
            continue
        n = min(len(y) for y in ys)
        y = np.mean([y[:n] for y in ys], axis=0)
        ax.plot(np.arange(1, n + 1), _smooth(y, 10), color=color, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("share (10-step mean)")
    ax.set_title(title)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_budgets(axes: list[Axes], snaps: list[dict[str, Any]], colors: dict[str, Any]) -> None:
    seed0 = min((s["seed"] for s in snaps), default=0)
    steps = sorted({s["step"] for s in snaps if s["seed"] == seed0})
    for ax, step in zip(axes, steps, strict=False):
        plotted = False
        for s in snaps:
            if s["seed"] != seed0 or s["step"] != step:
                continue
            p = np.asarray(s["pass_rates"], dtype=np.float64)
            b = np.asarray(s["budgets"], dtype=np.float64)
            seen = ~np.isnan(p)
            ax.scatter(p[seen], b[seen], s=12, alpha=0.7, color=colors.get(s["run"], "k"), label=s["run"])
            plotted = plotted or bool(seen.any())
        ax.set_title(f"step {step}")
        ax.set_xlabel("p̂ (windowed pass rate)")
        ax.set_xlim(-0.03, 1.03)
        if plotted:
            ax.set_yscale("log", base=2)
        else:
            ax.text(0.5, 0.5, "no pass rates yet", ha="center", va="center", transform=ax.transAxes)
        ax.grid(alpha=0.3)
    if axes:
        axes[0].set_ylabel("rollouts given B_i")
        if axes[0].get_legend_handles_labels()[0]:
            axes[0].legend(fontsize=7)


def write_plots(rows: list[dict[str, Any]], snaps: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Write every plot of the folder; returns the paths written (empty when no step ran)."""
    labels = _labels(rows)
    if not labels:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    colors = _colors(labels)
    written: list[Path] = []

    def save(fig: plt.Figure, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(out_dir / name)

    reference = "uniform" if "uniform" in labels else labels[0]
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.4))
    plot_accuracy(axs[0], rows, colors)
    if not plot_paired_gain(axs[1], rows, colors, reference):
        axs[1].set_axis_off()
    save(fig, "accuracy_vs_rollouts.png")

    n_snap = max(
        1, len({s["step"] for s in snaps if s["seed"] == min((t["seed"] for t in snaps), default=0)})
    )
    fig, axs = plt.subplots(1, n_snap, figsize=(3.4 * n_snap, 3.4), sharey=True, squeeze=False)
    plot_budgets(list(axs[0]), snaps, colors)
    fig.suptitle("Budget given vs pass rate (first seed)")
    save(fig, "budget_vs_pass_rate.png")

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    plot_alpha(ax, rows, colors)
    save(fig, "alpha.png")

    fig, axs = plt.subplots(1, 2, figsize=(11, 4.0))
    plot_zero_grad(axs[0], rows, colors, "zero_grad_share", "Groups with zero GRPO gradient")
    plot_zero_grad(axs[1], rows, colors, "zero_grad_rollout_share", "Rollouts spent in such groups")
    save(fig, "zero_grad.png")

    fig, axs = plt.subplots(2, 2, figsize=(12, 8.5))
    if len(labels) < 2 or not plot_paired_gain(axs[0, 0], rows, colors, reference):
        plot_accuracy(axs[0, 0], rows, colors)
    plot_zero_grad(axs[0, 1], rows, colors, "zero_grad_rollout_share", "Rollouts in zero-gradient groups")
    plot_alpha(axs[1, 0], rows, colors)
    last = [s for s in snaps if s["step"] == max((t["step"] for t in snaps), default=0)]
    plot_budgets([axs[1, 1]], last, colors)
    axs[1, 1].set_ylabel("rollouts given B_i")
    save(fig, "overview.png")
    return written
