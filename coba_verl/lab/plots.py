"""PNG plots of a lab run folder (matplotlib, Agg backend; nothing is shown on screen).

accuracy_vs_rollouts.png   held-out avg@k vs training rollouts (mean over seeds), and each run's
                           paired difference to uniform: with several seeds its 95 % t-interval
                           over seeds as a band, with one seed the single difference (no band)
regime.png                 which phase the allocator was in: F̄ over steps, α_t over steps,
                           uniform vs uniform@0.5 at equal steps (when uniform@0.5 ran), uniform's
                           training pass-rate histogram in the first vs the last epoch
budget_vs_pass_rate.png    B_i against p̂_i at a few steps, per strategy (cf. paper Fig. 4); the
                           marker area counts the prompts on one point
zero_grad.png              share of groups, and of rollouts, with no GRPO signal
overview.png               paired difference, wasted rollouts, F̄, budgets at the last step
accuracy_vs_compute.png    held-out accuracy vs steps, vs rollouts generated and vs response
                           tokens generated (mean over seeds; under DAPO generated > trained)

`figures` builds them (tests read their titles and artists); `write_plots` saves them.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from coba_verl.lab.composition import PASS_BINS  # noqa: E402
from coba_verl.lab.report import t_interval  # noqa: E402

__all__ = ["PLOT_FILES", "figures", "write_plots"]

PLOT_FILES = (
    "accuracy_vs_rollouts.png",
    "regime.png",
    "budget_vs_pass_rate.png",
    "zero_grad.png",
    "overview.png",
    "accuracy_vs_compute.png",
)

_MARKERS = "osD^vP*X"
_DODGE = 0.006
"""Shift of p̂ between strategies in the budget plot, so runs that give the same prompt the same
budget do not hide each other; small against the spacing of p̂ values (1/n, 1/16 in `paper`)."""


def _per_step(rows: list[dict[str, Any]], label: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, mean over seeds of ``key``) of one run label, over the steps every seed reached."""
    by_seed: dict[int, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["run"] == label and r["step"] > 0:
            by_seed[r["seed"]][r["step"]] = float(r[key])
    if not by_seed:
        return np.zeros(0), np.zeros(0)
    steps = sorted(set.intersection(*(set(d) for d in by_seed.values())))
    return np.asarray(steps), np.asarray([np.mean([d[s] for d in by_seed.values()]) for s in steps])


def _eval_curves(rows: list[dict[str, Any]], label: str) -> dict[int, dict[int, float]]:
    """seed -> {step: held-out accuracy} of one run label, with the warm start at step 0."""
    start = {r["seed"]: r["eval_acc"] for r in rows if r["step"] == 0}
    per_seed: dict[int, dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["run"] == label and r["step"] > 0 and not math.isnan(r["eval_acc"]):
            per_seed[r["seed"]][r["step"]] = r["eval_acc"]
    for s in per_seed:
        if s in start:
            per_seed[s][0] = start[s]
    return per_seed


def _budget(rows: list[dict[str, Any]], label: str) -> int:
    return next(r["total_budget"] for r in rows if r["run"] == label and r["step"] > 0)


def plot_accuracy(
    ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], k: int, *, per_step: bool = False
) -> None:
    """Held-out accuracy, mean over seeds, against training rollouts (or steps: ``per_step``)."""
    n = 0
    for label, color in colors.items():
        per_seed = _eval_curves(rows, label)
        if not per_seed:
            continue
        steps = sorted(set.intersection(*(set(d) for d in per_seed.values())))
        ys = np.array([[d[x] for x in steps] for d in per_seed.values()])  # (seeds, points)
        n = ys.shape[0]
        x = np.asarray(steps) * (1 if per_step else _budget(rows, label))
        ax.plot(x, ys.mean(0), "-o", ms=3, color=color, label=label)
    ax.set_xlabel("step" if per_step else "training rollouts spent")
    ax.set_ylabel(f"held-out accuracy (avg@{k}, T=1)")
    against = "step" if per_step else "rollouts"
    ax.set_title(f"Held-out accuracy vs {against}" + (f" (mean of {n} seeds)" if n > 1 else " (one seed)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_paired_gain(ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], reference: str) -> bool:
    """Accuracy minus the reference's at the same step and seed: mean over seeds, with a 95 %
    t-interval band when two or more seeds pair up; the title says which (n = 1: no band)."""
    ref = _eval_curves(rows, reference)
    if not ref:
        return False
    n_seeds = 0
    for label, color in colors.items():
        if label == reference:
            continue
        diffs: dict[int, list[float]] = defaultdict(list)
        for s, pts in _eval_curves(rows, label).items():
            for step, acc in pts.items():
                if s in ref and step in ref[s]:
                    diffs[step].append(acc - ref[s][step])
        steps = sorted(diffs)
        if not steps:
            continue
        n_seeds = max(n_seeds, *(len(d) for d in diffs.values()))
        x = np.asarray(steps) * _budget(rows, label)
        mean, half = np.array([t_interval(diffs[st]) for st in steps]).T
        ax.plot(x, mean, "-o", ms=3, color=color, label=label)
        if not np.isnan(half).all():
            ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.15)
    ax.axhline(0.0, color=colors.get(reference, "k"), lw=1, ls="--", label=reference)
    ax.set_xlabel("training rollouts spent")
    ax.set_ylabel(f"accuracy minus {reference}'s at the same step")
    if n_seeds > 1:
        head, detail = f"mean of n = {n_seeds} seeds", "band: 95 % t-interval over seeds"
    else:
        head, detail = "n = 1 seed", "one difference per step, no interval; --seeds 0,1,2 gives 95 % bands"
    ax.set_title(f"Paired difference to {reference}, {head}\n({detail})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return True


def plot_fail_rate(ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any]) -> None:
    """F̄ over steps. What F̄ = 0.5 means for CoBA is written on a right-hand axis, outside the
    data area, so it cannot cover a curve."""
    for label, color in colors.items():
        x, y = _per_step(rows, label, "fail_rate_avg3")
        ax.plot(x, y, color=color, lw=1.2, label=label)
    ax.axhline(0.5, color="k", lw=0.8, ls=":", label="F̄ = 0.5")
    side = ax.secondary_yaxis("right")
    side.set_yticks([0.75, 0.25], ["CoBA\nexploits\n(F̄ > 0.5)", "CoBA\nexplores\n(F̄ < 0.5)"], fontsize=7)
    side.tick_params(length=0)
    ax.set_xlabel("step")
    ax.set_ylabel("F̄ (batch failure rate, 3-step mean)")
    ax.set_title("Capability: prompt-averaged failure rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_alpha(ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any]) -> None:
    """α_t and β_t that drove each step of the runs that allocate with a Beta (NaN steps skipped)."""
    for label, color in colors.items():
        x, a = _per_step(rows, label, "alpha")
        keep = ~np.isnan(a)
        if not keep.any():
            continue  # uniform, knapsack: no Beta
        _, b = _per_step(rows, label, "beta")
        ax.plot(x[keep], a[keep], color=color, lw=1.2, label=f"{label} α")
        ax.plot(x[keep], b[keep], color=color, lw=1.0, ls="--", label=f"{label} β")
    ax.set_xlabel("step")
    ax.set_ylabel("Beta shape")
    ax.set_title("α_t (solid), β_t (dashed); α > β: exploit (easy prompts)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no run allocates with a Beta", ha="center", va="center", transform=ax.transAxes)


def plot_rollout_limited(
    ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], reference: str, k: int
) -> None:
    """``reference`` against itself at a smaller budget scale (``uniform@0.5``), per step: the same
    prompts at each step, fewer rollouts each. Ending clearly lower means rollouts limit progress
    (the regime where reallocating them can matter). Without such a run, a note says how to get one
    instead of repeating the reference's curve."""
    smaller = [lb for lb in colors if lb.startswith(f"{reference}@")]
    if not smaller:
        ax.set_axis_off()
        ax.text(
            0.5,
            0.5,
            f"Rollout-limited? Not measured: no {reference}@0.5 run.\n\n"
            f"Add {reference}@0.5 to --runs (half the rollouts per step).\n"
            f"If it ends clearly below {reference}, rollouts limit progress\n"
            "and how they are spread can matter (docs/lab.md).",
            ha="center",
            va="center",
            fontsize=9,
            transform=ax.transAxes,
        )
        return
    plot_accuracy(ax, rows, {lb: colors[lb] for lb in (reference, *smaller)}, k, per_step=True)
    ax.set_title(
        f"Rollout-limited? {reference} vs {', '.join(smaller)}\n(fewer rollouts per step, same prompts)"
    )


def plot_histograms(ax: Axes, rows: list[dict[str, Any]], label: str) -> None:
    """Training pass-rate histogram of ``label``'s batches in the first and in the last epoch."""
    rs = [r for r in rows if r["run"] == label and r["step"] > 0 and r.get("pass_hist") is not None]
    if not rs:
        ax.set_axis_off()
        return
    last = max(r["epoch"] for r in rs)
    x = np.arange(len(PASS_BINS))
    for i, (epoch, name) in enumerate([(1, "epoch 1"), (last, f"epoch {last} (last)")]):
        counts = np.sum([r["pass_hist"] for r in rs if r["epoch"] == epoch], axis=0)
        ax.bar(x + (i - 0.5) * 0.4, counts / max(1, counts.sum()), width=0.4, label=name)
    ax.set_xticks(x, PASS_BINS, fontsize=8)
    ax.set_xlabel("per-prompt pass rate in its training batch")
    ax.set_ylabel("share of prompts")
    ax.set_title(f"How hard {label}'s training prompts were: first vs last epoch")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)


def plot_zero_grad(
    ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], key: str, title: str
) -> None:
    for label, color in colors.items():
        x, y = _per_step(rows, label, key)
        w = min(10, max(1, y.size))
        ax.plot(x[w - 1 :], np.convolve(y, np.ones(w) / w, mode="valid"), color=color, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("share (10-step mean)")
    ax.set_title(title)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_budgets(axes: list[Axes], snaps: list[dict[str, Any]], colors: dict[str, Any]) -> dict[str, Line2D]:
    """B_i against p̂_i of the first seed, one axis per snapshot step; returns a legend handle per run.

    Many prompts share a point (p̂ takes few values), so marker area ∝ their count; each strategy
    has its own hollow marker and is shifted by `_DODGE` in p̂, so equal points stay visible.
    """
    seed0 = min((s["seed"] for s in snaps), default=0)
    steps = sorted({s["step"] for s in snaps if s["seed"] == seed0})
    shift = {lb: (i - (len(colors) - 1) / 2) * _DODGE for i, lb in enumerate(colors)}
    style = {lb: (colors[lb], _MARKERS[i % len(_MARKERS)]) for i, lb in enumerate(colors)}
    handles: dict[str, Line2D] = {}
    for ax, step in zip(axes, steps, strict=False):
        for s in snaps:
            if s["seed"] != seed0 or s["step"] != step:
                continue
            pts = Counter(
                (p, b) for p, b in zip(s["pass_rates"], s["budgets"], strict=True) if p is not None and p == p
            )
            if not pts:
                continue
            color, marker = style.get(s["run"], ("k", "o"))
            (p, b), n = zip(*pts, strict=True), np.asarray(list(pts.values()))
            x = np.asarray(p) + shift.get(s["run"], 0.0)
            ax.scatter(x, b, s=8 * n, marker=marker, facecolors="none", edgecolors=color, lw=1.0, alpha=0.8)
            handles[s["run"]] = Line2D([], [], ls="", marker=marker, mfc="none", mec=color, label=s["run"])
        ax.set_title(f"step {step}")
        ax.set_xlabel("p̂ (windowed pass rate)")
        ax.set_xlim(-0.05, 1.05)
        if ax.collections:
            ax.set_yscale("log", base=2)
        else:
            ax.text(0.5, 0.5, "no pass rates yet", ha="center", va="center", transform=ax.transAxes)
        ax.grid(alpha=0.3)
    if axes:
        axes[0].set_ylabel("rollouts given B_i")
    return {lb: handles[lb] for lb in colors if lb in handles}


def figures(rows: list[dict[str, Any]], snaps: list[dict[str, Any]], *, k: int) -> dict[str, Figure]:
    """Every plot of the folder, file name -> figure (``k``: samples per held-out prompt); the
    caller closes them. Empty when no step ran."""
    labels = list(dict.fromkeys(r["run"] for r in rows if r["step"] > 0))
    if not labels:
        return {}
    cmap = plt.get_cmap("tab10")
    colors = {lb: cmap(i % 10) for i, lb in enumerate(labels)}
    reference = "uniform" if "uniform" in labels else labels[0]
    out: dict[str, Figure] = {}

    fig, axs = plt.subplots(1, 2, figsize=(12, 4.6))
    plot_accuracy(axs[0], rows, colors, k)
    if not plot_paired_gain(axs[1], rows, colors, reference):
        axs[1].set_axis_off()
    fig.tight_layout()
    out["accuracy_vs_rollouts.png"] = fig

    fig, axs = plt.subplots(2, 2, figsize=(12, 8.5))
    plot_fail_rate(axs[0, 0], rows, colors)
    plot_alpha(axs[0, 1], rows, colors)
    plot_rollout_limited(axs[1, 0], rows, colors, reference, k)
    plot_histograms(axs[1, 1], rows, reference)
    fig.suptitle("Regime: which phase was the allocator in?")
    fig.tight_layout()
    out["regime.png"] = fig

    seed0 = min((t["seed"] for t in snaps), default=0)
    n_snap = max(1, len({s["step"] for s in snaps if s["seed"] == seed0}))
    fig, axs = plt.subplots(1, n_snap, figsize=(3.4 * n_snap, 3.9), sharey=True, squeeze=False)
    handles = plot_budgets(list(axs[0]), snaps, colors)
    fig.suptitle("Budget given vs pass rate (first seed; marker area ∝ prompts on the point)")
    if handles:
        fig.legend(handles=list(handles.values()), loc="lower center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0.08 if handles else 0, 1, 1))
    out["budget_vs_pass_rate.png"] = fig

    fig, axs = plt.subplots(1, 2, figsize=(11, 4.0))
    plot_zero_grad(axs[0], rows, colors, "zero_grad_share", "Groups with zero GRPO gradient")
    plot_zero_grad(axs[1], rows, colors, "zero_grad_rollout_share", "Rollouts spent in such groups")
    fig.tight_layout()
    out["zero_grad.png"] = fig

    fig, axs = plt.subplots(2, 2, figsize=(12, 8.5))
    if len(labels) < 2 or not plot_paired_gain(axs[0, 0], rows, colors, reference):
        plot_accuracy(axs[0, 0], rows, colors, k)
    plot_zero_grad(axs[0, 1], rows, colors, "zero_grad_rollout_share", "Rollouts in zero-gradient groups")
    plot_fail_rate(axs[1, 0], rows, colors)
    last = [s for s in snaps if s["step"] == max((t["step"] for t in snaps), default=0)]
    handles = plot_budgets([axs[1, 1]], last, colors)
    if handles:
        axs[1, 1].legend(handles=list(handles.values()), fontsize=7)
    axs[1, 1].set_title(f"Budget given vs pass rate, {axs[1, 1].get_title()} (first seed; area ∝ prompts)")
    fig.tight_layout()
    out["overview.png"] = fig

    fig, axs = plt.subplots(1, 3, figsize=(16, 4.4))
    plot_accuracy(axs[0], rows, colors, k, per_step=True)
    plot_accuracy_vs(axs[1], rows, colors, k, "rollouts_generated", "rollouts generated")
    plot_accuracy_vs(axs[2], rows, colors, k, "tokens_generated", "response tokens generated")
    fig.suptitle("Held-out accuracy per step and per generated compute (mean over seeds)")
    fig.tight_layout()
    out["accuracy_vs_compute.png"] = fig
    return out


def plot_accuracy_vs(
    ax: Axes, rows: list[dict[str, Any]], colors: dict[str, Any], k: int, key: str, name: str
) -> None:
    """Held-out accuracy against a cumulative count ``key`` of the rows (generated rollouts or
    tokens): the mean over seeds of both, at each evaluated step every seed reached."""
    start = {r["seed"]: r["eval_acc"] for r in rows if r["step"] == 0}
    for label, color in colors.items():
        per_seed: dict[int, dict[int, tuple[float, float]]] = defaultdict(dict)
        for r in rows:
            if r["run"] == label and r["step"] > 0 and not math.isnan(r["eval_acc"]) and key in r:
                per_seed[r["seed"]][r["step"]] = (float(r[key]), r["eval_acc"])
        if not per_seed:
            continue
        for s in per_seed:
            if s in start:
                per_seed[s][0] = (0.0, start[s])
        steps = sorted(set.intersection(*(set(d) for d in per_seed.values())))
        pts = np.array([[d[st] for st in steps] for d in per_seed.values()])  # (seeds, points, 2)
        ax.plot(pts[..., 0].mean(0), pts[..., 1].mean(0), "-o", ms=3, color=color, label=label)
    ax.set_xlabel(name)
    ax.set_ylabel(f"held-out accuracy (avg@{k}, T=1)")
    ax.set_title(f"Held-out accuracy vs {name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def write_plots(
    rows: list[dict[str, Any]], snaps: list[dict[str, Any]], out_dir: Path, *, k: int
) -> list[Path]:
    """Write every plot of `figures` under ``out_dir``; returns the paths written."""
    written: list[Path] = []
    figs = figures(rows, snaps, k=k)
    if figs:
        out_dir.mkdir(parents=True, exist_ok=True)
    for name, fig in figs.items():
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(out_dir / name)
    return written
