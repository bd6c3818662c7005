"""Statistics of a lab run folder: per run label over seeds, paired with ``uniform`` of the same seed.

Every run of a seed shares the warm start, the prompt order and the evaluation's random numbers,
so the difference between two runs of one seed is far less noisy than either run. With two or
more seeds the summary gives 95 % t-intervals over seeds of those paired differences; with one
seed it gives the single difference and says that it has no interval (`seeds_note`).

`format_summary` is the text of ``summary.txt`` and of the command's output: the seeds note and
the column legend (`LEGEND`) first, then the comparison table (`format_table`) and the regime
table (`format_regime`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "t_interval", "summarise", "regime", "format_table", "format_regime", "format_summary", "seeds_note",
    "LEGEND",
]  # fmt: skip

LEGEND = """\
Columns of the comparison table:

    seeds                        seeds the run finished; its numbers are means over them
    rollouts/step                the run's rollouts per step, M * n * scale
    final acc                    held-out avg@k at the last step
    Δ final vs uniform           final acc minus uniform's of the same seed
    AUC                          area under held-out accuracy vs training rollouts (from the warm
                                 start at 0 rollouts to the run's last step), divided by the run's
                                 rollouts: the mean accuracy over training
    Δ AUC vs uniform             AUC minus uniform's of the same seed
    rollouts to uniform's final  training rollouts until held-out accuracy first reaches uniform's
                                 final accuracy of the same seed; mean over the seeds that do (k/n
                                 of them)
    zero-var groups              share of prompt groups whose rollouts all pass or all fail (no
                                 GRPO signal)
    zero-var rollouts            share of the rollouts spent in such groups
    plugin                       allocate + observe + end_step as a share of the step's wall time
    s/step                       mean wall time of a step, evaluation excluded

With two or more seeds, final acc, Δ final, AUC and Δ AUC carry a 95 % t-interval over seeds in
brackets, [low, high]; with one seed they are single values.

Columns of the regime table, which says which phase an allocator was in:

    F̄ start / end                prompt-averaged batch failure rate, mean of the first / last 3 steps
    α_t                          the Beta shape's α that drove allocation at the start of epoch 2,
                                 the middle and the last step (only for strategies that use one)
    train pass rates             per-prompt pass rates of the training batches in the first and the
                                 last epoch: share at 0, strictly between, at 1"""
"""The column legend of the summary; the same for every run folder (bench/learning.py cuts it out)."""


def seeds_note(n_seeds: int, reference: str = "uniform") -> str:
    """What the summary's numbers can and cannot show with ``n_seeds`` seeds.

    One seed gives one paired difference per run (its run minus ``reference``'s, same warm start,
    prompts and evaluation noise): a direction and a size, but nothing about how much it would
    move on another seed, so no interval. Several seeds give a t-interval over the per-seed
    differences.
    """
    if n_seeds == 1:
        return (
            f"One seed: each Δ is a single paired difference, this seed's run minus {reference}'s.\n"
            "It shows the direction and size of one comparison, not whether another seed would agree:\n"
            "there is no interval, and a difference of a few points may be seed noise. For 95 %\n"
            "t-intervals over seeds, run several, e.g. --seeds 0,1,2,3,4."
        )
    return (
        f"{n_seeds} seeds: each Δ is the mean over seeds of the paired difference (a run minus\n"
        f"{reference}'s of the same seed), with its 95 % t-interval over the seeds in brackets."
    )


def t_interval(xs: list[float] | np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the two-sided t-interval); half-width NaN for fewer than two values."""
    a = np.asarray([x for x in xs if not math.isnan(x)], dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan")
    if a.size == 1:
        return float(a[0]), float("nan")
    half = stats.t.ppf(0.5 + level / 2, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size)
    return float(a.mean()), float(half)


def _by_run(
    rows: list[dict[str, Any]],
) -> tuple[dict[str, dict[int, list[dict[str, Any]]]], dict[int, float]]:
    """(label -> seed -> step rows, seed -> warm-start accuracy); labels in first-seen order."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    start: dict[int, float] = {}
    for r in rows:
        if r["step"] == 0:
            start[r["seed"]] = r["eval_acc"]
        else:
            runs[r["run"]][r["seed"]].append(r)
    return runs, start


def _curve(rs: list[dict[str, Any]], start: float | None) -> list[tuple[int, float]]:
    """[(rollouts, held-out accuracy)] of one run of one seed, from the warm start when known."""
    head = [] if start is None or math.isnan(start) else [(0, start)]
    return head + [(r["rollouts"], r["eval_acc"]) for r in rs if not math.isnan(r["eval_acc"])]


def _auc(curve: list[tuple[int, float]]) -> float:
    if len(curve) < 2:
        return float("nan")
    x, y = np.asarray(curve, dtype=np.float64).T
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / (x[-1] - x[0]))


def _first_reach(curve: list[tuple[int, float]], target: float) -> float:
    return next((float(x) for x, acc in curve if acc >= target - 1e-12), float("nan"))


def summarise(rows: list[dict[str, Any]], reference: str = "uniform") -> list[dict[str, Any]]:
    """One dict per run label (first-seen order): the comparison table's numbers, see the module doc."""
    runs, start = _by_run(rows)
    ref_curves = {s: _curve(rs, start.get(s)) for s, rs in runs.get(reference, {}).items()}
    out: list[dict[str, Any]] = []
    for label, by_seed in runs.items():
        seeds = sorted(by_seed)
        curves = {s: _curve(by_seed[s], start.get(s)) for s in seeds}
        final = {s: c[-1][1] if c else float("nan") for s, c in curves.items()}
        auc = {s: _auc(c) for s, c in curves.items()}
        paired = [s for s in seeds if ref_curves.get(s)]
        d_final = [final[s] - ref_curves[s][-1][1] for s in paired]
        d_auc = [auc[s] - _auc(ref_curves[s]) for s in paired]
        reach = [_first_reach(curves[s], ref_curves[s][-1][1]) for s in paired if label != reference]
        reached = [x for x in reach if not math.isnan(x)]
        every = [r for s in seeds for r in by_seed[s]]
        out.append(
            {
                "run": label,
                "seeds": len(seeds),
                "steps": int(min(by_seed[s][-1]["step"] for s in seeds)),
                "rollouts_per_step": int(every[0]["total_budget"]),
                "rollouts": int(by_seed[seeds[0]][-1]["rollouts"]),
                "final_acc": t_interval(list(final.values())),
                "d_final": t_interval(d_final) if label != reference else (float("nan"), float("nan")),
                "auc": t_interval(list(auc.values())),
                "d_auc": t_interval(d_auc) if label != reference else (float("nan"), float("nan")),
                "paired_seeds": len(paired),
                "rollouts_to_ref": float(np.mean(reached)) if reached else float("nan"),
                "rollouts_to_ref_reached": len(reached),
                "zero_var_groups": float(np.mean([r["zero_grad_share"] for r in every])),
                "zero_var_rollouts": float(np.mean([r["zero_grad_rollout_share"] for r in every])),
                "plugin_share": float(sum(r["plugin_s"] for r in every) / sum(r["step_s"] for r in every)),
                "step_s": float(np.mean([r["step_s"] for r in every])),
            }
        )
    return out


def _hist(rs: list[dict[str, Any]]) -> list[float]:
    counts = np.sum([r["pass_hist"] for r in rs if r.get("pass_hist") is not None], axis=0)
    return (np.asarray(counts, dtype=np.float64) / max(1.0, float(np.sum(counts)))).tolist()


def regime(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per run label: F̄ at the start and end, α_t, pass-rate histograms (module doc)."""
    runs, _ = _by_run(rows)
    out: list[dict[str, Any]] = []
    for label, by_seed in runs.items():
        seeds = sorted(by_seed)
        every = [r for s in seeds for r in by_seed[s]]
        last_epoch = max(r["epoch"] for r in every)
        alphas = {}
        for s in seeds:
            used = [(r["step"], r["alpha"]) for r in by_seed[s] if not math.isnan(r.get("alpha", math.nan))]
            if used:
                pick = [used[0], used[len(used) // 2], used[-1]]
                alphas[s] = [a for _, a in pick]
                alphas.setdefault("steps", [st for st, _ in pick])
        alpha_seeds = [v for k, v in alphas.items() if k != "steps"]
        out.append(
            {
                "run": label,
                "f_bar_start": float(
                    np.mean([np.mean([r["fail_rate"] for r in by_seed[s][:3]]) for s in seeds])
                ),
                "f_bar_end": float(
                    np.mean([np.mean([r["fail_rate"] for r in by_seed[s][-3:]]) for s in seeds])
                ),
                "alpha": np.mean(alpha_seeds, axis=0).tolist() if alpha_seeds else None,
                "alpha_steps": alphas.get("steps"),
                "hist_start": _hist([r for r in every if r["epoch"] == 1]),
                "hist_end": _hist([r for r in every if r["epoch"] == last_epoch]),
                "last_epoch": last_epoch,
            }
        )
    return out


def _ci(mean_half: tuple[float, float], fmt: str = ".3f", signed: bool = False) -> str:
    mean, half = mean_half
    if math.isnan(mean):
        return "-"
    text = format(mean, ("+" if signed else "") + fmt)
    if math.isnan(half):
        return text
    return f"{text} [{mean - half:{'+' if signed else ''}{fmt}}, {mean + half:{'+' if signed else ''}{fmt}}]"


def format_table(summary: list[dict[str, Any]], reference: str = "uniform") -> str:
    """The comparison table as Markdown (readable as plain text too); see the module doc."""
    head = (
        f"| run | seeds | rollouts/step | final acc | Δ final vs {reference} | AUC | Δ AUC vs {reference} "
        f"| rollouts to {reference}'s final | zero-var groups | zero-var rollouts | plugin | s/step |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in summary:
        if s["run"] == reference or not s["paired_seeds"]:
            reach = "-"
        elif math.isnan(s["rollouts_to_ref"]):
            reach = f"not reached (0/{s['paired_seeds']})"
        else:
            reach = f"{s['rollouts_to_ref']:,.0f} ({s['rollouts_to_ref_reached']}/{s['paired_seeds']})"
        lines.append(
            f"| {s['run']} | {s['seeds']} | {s['rollouts_per_step']:,} | {_ci(s['final_acc'])} "
            f"| {_ci(s['d_final'], signed=True)} | {_ci(s['auc'])} | {_ci(s['d_auc'], signed=True)} "
            f"| {reach} | {s['zero_var_groups']:.1%} | {s['zero_var_rollouts']:.1%} "
            f"| {s['plugin_share']:.2%} | {s['step_s']:.3f} |"
        )
    return "\n".join(lines)


def format_regime(reg: list[dict[str, Any]]) -> str:
    """The regime table as Markdown; see the module doc."""
    head = (
        "| run | F̄ start | F̄ end | α_t (epoch 2 start / middle / end) "
        "| train pass rates epoch 1: 0 / between / 1 | last epoch: 0 / between / 1 |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def three(h: list[float]) -> str:
        return f"{h[0]:.0%} / {sum(h[1:-1]):.0%} / {h[-1]:.0%}" if h else "-"

    for g in reg:
        alpha = " / ".join(f"{a:.2f}" for a in g["alpha"]) if g["alpha"] else "- (no Beta)"
        lines.append(
            f"| {g['run']} | {g['f_bar_start']:.2f} | {g['f_bar_end']:.2f} | {alpha} "
            f"| {three(g['hist_start'])} | {three(g['hist_end'])} |"
        )
    return "\n".join(lines)


def format_summary(
    summary: list[dict[str, Any]], reg: list[dict[str, Any]], reference: str = "uniform"
) -> str:
    """The text of ``summary.txt``: the seeds note and `LEGEND` above the two tables, so nothing
    refers to a table or an interval further down that may be absent; ``(no step ran)`` when empty."""
    if not summary:
        return "(no step ran)"
    n_seeds = max(s["seeds"] for s in summary)
    return (
        f"{seeds_note(n_seeds, reference)}\n\n{LEGEND}\n\n"
        f"Comparison:\n\n{format_table(summary, reference)}\n\nRegime:\n\n{format_regime(reg)}"
    )
