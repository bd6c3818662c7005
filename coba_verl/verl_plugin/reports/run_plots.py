"""Pictures of coba-verl runs, drawn from veRL's file-logger metrics (matplotlib, Agg backend).

``trainer.logger=[console,file]`` with ``VERL_FILE_LOGGER_PATH=FILE`` makes veRL write one JSON line
per logged step (`metrics_file.read_metrics` reads it). From such files::

    python -m coba_verl.verl_plugin.reports.run_plots summary METRICS --out summary.png
    python -m coba_verl.verl_plugin.reports.run_plots budgets METRICS --out budgets.png
    python -m coba_verl.verl_plugin.reports.run_plots generated --run uniform=U.jsonl --run coba=C.jsonl \
        --out g.png

``summary`` is the run summary's picture (``run_summary --png``): per training step the budgets
(min, mean, max of B_i), the share of groups without reward spread (observed, and the share the
tracker's pass rates predict with these budgets and with the same number for every prompt) and
the rollouts generated against those trained. ``budgets`` shows how the allocator spreads a
step's budget: the prompts per budget bin (``coba/budget_hist/*``) step by step, the failure
rate F̄ that moves the Beta (spec §3) and the pass rate its mode favours, and the Beta weight
BetaPdf(p; α_t, β_t) of the value (spec §4) over pass rates at three steps. ``generated`` compares
runs by rollouts generated per trained rollout, step by step (``coba/rollouts_generated`` /
``coba/trained_rollouts``; 1 without DAPO dynamic sampling); a label given several files (seeds)
is drawn as their mean, each file thin beside it.

Every series is a logged metric or a ratio of two (no model, no fit); a step that did not log
a metric leaves a gap.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from coba_verl.core.allocator import METRIC_PREFIX as PREFIX  # noqa: E402
from coba_verl.core.values import beta_density  # noqa: E402
from coba_verl.refusal import CobaRefusal, exit_on_refusal  # noqa: E402
from coba_verl.verl_plugin.reports.metrics_file import read_metrics  # noqa: E402

__all__ = ["budget_figure", "generated_figure", "main", "save", "summary_figure", "training_steps"]

logger = logging.getLogger(__name__)

Metrics = Mapping[int, Mapping[str, float]]


def training_steps(metrics: Metrics, source: str | Path = "the metrics") -> list[int]:
    """The steps that logged coba-verl's budgets (``coba/budget_min``), in order; a refusal if none did."""
    steps = [s for s in sorted(metrics) if PREFIX + "budget_min" in metrics[s]]
    if not steps:
        raise CobaRefusal(
            f"{source}: no step logged coba/budget_min; give the file logger's JSON lines of a coba-verl "
            "run (trainer.logger=[console,file] with VERL_FILE_LOGGER_PATH=FILE)"
        )
    return steps


def _series(metrics: Metrics, steps: Sequence[int], name: str) -> np.ndarray:
    """``coba/<name>`` at each step, NaN where the step did not log it."""
    return np.array([float(metrics[s].get(PREFIX + name, math.nan)) for s in steps])


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / bottom, np.nan)


def summary_figure(metrics: Metrics, title: str = "") -> Figure:
    """The run summary's picture: budgets, groups without reward spread, generated vs trained.

    Panels, x = training step: (1) min, mean and max of B_i; (2) the observed share of groups
    whose rollouts all failed or all passed (``coba/all_fail_share + all_pass_share``) and, where
    logged, the share the tracker's pass rates predict with these budgets and with the mean budget
    for every prompt (``expected_zero_var_share``, ``..._uniform``); (3) ``coba/rollouts_generated``
    and ``coba/trained_rollouts`` (generated = trained + cut + evicted + failed, the ledger's rule).
    """
    steps = training_steps(metrics)
    x = np.array(steps)
    fig, (budgets, zero, work) = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    low, mean, high = (_series(metrics, steps, f"budget_{k}") for k in ("min", "mean", "max"))
    budgets.fill_between(x, low, high, color="tab:blue", alpha=0.2, label="min-max")
    budgets.plot(x, high, color="tab:blue", lw=1, label="max")
    budgets.plot(x, mean, color="k", lw=1.5, label="mean")
    budgets.plot(x, low, color="tab:blue", lw=1, ls="--", label="min")
    budgets.set_ylabel("rollouts per prompt B_i")
    budgets.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    observed = _series(metrics, steps, "all_fail_share") + _series(metrics, steps, "all_pass_share")
    zero.plot(x, observed, "o-", color="tab:red", ms=3, label="observed")
    expected = _series(metrics, steps, "expected_zero_var_share")
    if np.isfinite(expected).any():
        zero.plot(x, expected, color="tab:purple", lw=1.5, label="expected, these budgets")
        uniform = _series(metrics, steps, "expected_zero_var_share_uniform")
        zero.plot(x, uniform, color="grey", lw=1.5, ls="--", label="expected, uniform budgets")
    zero.set_ylim(-0.02, 1.02)
    zero.set_ylabel("groups without\nreward spread")
    zero.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    generated = _series(metrics, steps, "rollouts_generated")
    trained = _series(metrics, steps, "trained_rollouts")
    if np.isfinite(generated).any() or np.isfinite(trained).any():
        work.plot(x, trained, "s-", color="tab:green", lw=3, ms=5, label="trained")
        # generated drawn over trained: the two are equal without DAPO dynamic sampling
        work.plot(x, generated, "o--", color="tab:orange", ms=3, label="generated")
        work.set_ylim(bottom=0)
        work.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    else:
        work.text(0.5, 0.5, "rollouts generated / trained not logged", ha="center", transform=work.transAxes)
    work.set_ylabel("rollouts per step")
    work.set_xlabel("training step")
    for ax in (budgets, zero, work):
        ax.grid(alpha=0.3)
    fig.suptitle(title or "coba-verl run summary")
    fig.tight_layout()
    return fig


def _histogram_bins(metrics: Metrics, steps: Sequence[int]) -> list[tuple[int, int, str]]:
    """(low, high, metric name) of every ``coba/budget_hist/<low>-<high>`` bin logged, by low."""
    names = {k for s in steps for k in metrics[s] if k.startswith(PREFIX + "budget_hist/")}
    bins = []
    for name in names:
        low, _, high = name.rsplit("/", 1)[1].partition("-")
        bins.append((int(low), int(high), name))
    return sorted(bins)


def budget_figure(metrics: Metrics, title: str = "") -> Figure:
    """How the allocator spread each step's budget over prompts, and the Beta that moved it.

    Left, x = training step: (top) the step's prompts per budget bin, stacked
    (``coba/budget_hist/<lo>-<hi>``: prompts with lo <= B_i <= hi); (bottom) F̄, the mean failure
    rate of the last steps after each step (``coba/F_bar``, spec §3), and the mode of the Beta the
    step's allocation used, (α_t - 1) / (α_t + β_t - 2) (``coba/alpha``, ``coba/beta``): the pass
    rate whose prompts the value favours, equal to F̃ (spec §3, derived). Right: that Beta's
    density over pass rates, the weight of V(B, p) (spec §4), at the first, middle and last step
    that logged a Beta (none under ``uniform`` and ``knapsack``), one curve per distinct shape.
    """
    steps = training_steps(metrics)
    x = np.array(steps)
    fig = plt.figure(figsize=(11, 5.5))
    grid = fig.add_gridspec(2, 2, width_ratios=(2.2, 1), height_ratios=(1.6, 1))
    hist = fig.add_subplot(grid[0, 0])
    shape = fig.add_subplot(grid[1, 0], sharex=hist)
    weight = fig.add_subplot(grid[:, 1])

    bins = _histogram_bins(metrics, steps)
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, max(len(bins), 1)))
    bottom = np.zeros(len(steps))
    for (low, high, name), colour in zip(bins, colours, strict=False):
        counts = np.array([float(metrics[s].get(name, 0.0)) for s in steps])
        label = f"B = {low}" if low == high else f"B {low}-{high}"
        hist.bar(x, counts, bottom=bottom, color=colour, width=0.8, label=label)
        bottom += counts
    hist.set_ylabel("prompts of the step")
    hist.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="budget", title_fontsize=8)

    f_bar = _series(metrics, steps, "F_bar")
    alpha, beta = _series(metrics, steps, "alpha"), _series(metrics, steps, "beta")
    mode = _ratio(alpha - 1.0, alpha + beta - 2.0)
    shape.plot(x, f_bar, "o-", color="tab:red", ms=3, label="F̄ (failure rate, after the step)")
    shape.plot(x, mode, "s-", color="tab:blue", ms=3, label="Beta mode (pass rate favoured)")
    shape.set_ylim(-0.02, 1.02)
    shape.set_xlabel("training step")
    shape.legend(loc="lower left", fontsize=8)
    for ax in (hist, shape):
        ax.grid(alpha=0.3)

    shaped = [s for s, a, b in zip(steps, alpha, beta, strict=True) if math.isfinite(a) and math.isfinite(b)]
    p = np.linspace(0.005, 0.995, 199)
    shapes: dict[tuple[str, str], list[int]] = {}  # one curve per Beta (as printed), with its steps
    for step in sorted({shaped[0], shaped[len(shaped) // 2], shaped[-1]}) if shaped else []:
        a, b = float(metrics[step][PREFIX + "alpha"]), float(metrics[step][PREFIX + "beta"])
        shapes.setdefault((f"{a:.2f}", f"{b:.2f}"), []).append(step)
    for (a, b), at in shapes.items():
        steps_named = ("step " if len(at) == 1 else "steps ") + ", ".join(map(str, at))
        weight.plot(p, beta_density(p, float(a), float(b)), label=f"{steps_named}: α {a}, β {b}")
    if not shaped:
        weight.text(0.5, 0.5, "no Beta logged (uniform / knapsack)", ha="center", transform=weight.transAxes)
    weight.set_xlabel("prompt pass rate p")
    weight.set_ylabel("BetaPdf(p; α_t, β_t): weight of V(B, p)")
    weight.legend(loc="upper left", fontsize=8)
    weight.grid(alpha=0.3)
    fig.suptitle(title or "how coba-verl spread each step's rollouts")
    fig.tight_layout()
    return fig


def generated_figure(runs: Mapping[str, Sequence[Metrics]], title: str = "") -> Figure:
    """Rollouts generated per trained rollout, step by step, one colour per label.

    Per file, each step's ``coba/rollouts_generated / coba/trained_rollouts``; per label (several
    files: seeds), the mean over its files at each step, and, in the legend, the ratio pooled over
    every step and file (sum generated / sum trained).
    """
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for (label, files), colour in zip(runs.items(), plt.get_cmap("tab10").colors, strict=False):
        per_file = []
        pooled_generated = pooled_trained = 0.0
        for metrics in files:
            steps = training_steps(metrics, label)
            generated = _series(metrics, steps, "rollouts_generated")
            trained = _series(metrics, steps, "trained_rollouts")
            if not np.isfinite(generated).any():
                raise CobaRefusal(
                    f"{label}: no step logged coba/rollouts_generated; give a veRL V1 run's metrics"
                )
            ratio = _ratio(generated, trained)
            per_file.append(dict(zip(steps, ratio, strict=True)))
            pooled_generated += float(np.nansum(generated))
            pooled_trained += float(np.nansum(trained))
            if len(files) > 1:
                ax.plot(steps, ratio, color=colour, lw=0.6, alpha=0.4)
        steps = sorted({s for f in per_file for s in f})
        mean = [np.nanmean([f.get(s, np.nan) for f in per_file]) for s in steps]
        pooled = pooled_generated / pooled_trained if pooled_trained else math.nan
        seeds = f", {len(files)} seeds" if len(files) > 1 else ""
        ax.plot(steps, mean, "o-", color=colour, ms=3, lw=1.8, label=f"{label}: {pooled:.2f} overall{seeds}")
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("training step")
    ax.set_ylabel("rollouts generated per trained rollout")
    ax.legend(loc="upper right", fontsize=9)
    ax.grid(alpha=0.3)
    ax.set_title(title or "generated per trained rollout")
    fig.tight_layout()
    return fig


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders made), close it, and return the path."""
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    logger.info("wrote %s", out)
    return out


def _runs(pairs: Sequence[str]) -> dict[str, list[Metrics]]:
    """``LABEL=FILE`` pairs -> label -> the files' metrics, in the order given."""
    runs: dict[str, list[Metrics]] = {}
    for pair in pairs:
        label, sep, file = pair.partition("=")
        if not sep or not label or not file:
            raise CobaRefusal(f"--run {pair!r}: give LABEL=FILE, e.g. --run coba=runs/coba/metrics.jsonl")
        runs.setdefault(label, []).append(read_metrics(file))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coba_verl.verl_plugin.reports.run_plots {summary,budgets,generated} ... --out PNG``."""
    parser = argparse.ArgumentParser(
        prog="python -m coba_verl.verl_plugin.reports.run_plots",
        description="PNG pictures of coba-verl runs from veRL's file logger (VERL_FILE_LOGGER_PATH).",
    )
    sub = parser.add_subparsers(dest="picture", required=True)
    for name, what in (("summary", "budgets, groups without reward spread, generated vs trained"),
                       ("budgets", "prompts per budget bin step by step, F̄ and the Beta")):  # fmt: skip
        one = sub.add_parser(name, help=what)
        one.add_argument("metrics", help="the file logger's JSON lines")
    compare = sub.add_parser("generated", help="rollouts generated per trained rollout, runs side by side")
    compare.add_argument("--run", action="append", required=True, metavar="LABEL=FILE",
                         help="a run's metrics; repeat a label for its seeds")  # fmt: skip
    for one in sub.choices.values():
        one.add_argument("--out", required=True, help="the PNG to write")
        one.add_argument("--title", default="", help="the picture's title")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.picture == "generated":
        fig = generated_figure(_runs(args.run), args.title)
    else:
        draw = summary_figure if args.picture == "summary" else budget_figure
        metrics = read_metrics(args.metrics)
        training_steps(metrics, args.metrics)
        fig = draw(metrics, args.title)
    save(fig, args.out)
    return 0


if __name__ == "__main__":
    with exit_on_refusal():
        raise SystemExit(main())
