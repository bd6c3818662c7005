"""Statistics of a lab run folder: per run label over seeds, paired with ``uniform`` of the same seed.

Every run of a seed shares the warm start, the prompt order and the evaluation's random numbers,
so the difference between two runs of one seed is far less noisy than either run. With two or
more seeds the summary gives 95 % t-intervals over seeds of those paired differences; with one
seed it gives the single difference and says that it has no interval (`seeds_note`).

`format_summary` is the text of ``summary.txt`` and of the command's output: the seeds note and
the column legend (`LEGEND`) first, then the comparison table (`format_table`), the compute table
(`format_compute`: what was generated, and the compute to reach uniform's final accuracy) and the
regime table (`format_regime`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "t_interval", "summarise", "regime", "format_table", "format_compute", "format_regime", "format_summary",
    "seeds_note", "compute_to_target", "auc_until", "paired_deltas", "LEGEND",
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

Columns of the compute table (generated = every rollout sampled, trained or not; a token is a
response token, <eos> included):

    gen rollouts/step            rollouts generated per step (more than trained under DAPO)
    gen tokens/step              response tokens generated per step
    gen/trained                  rollouts generated per rollout trained
    gen rollouts (tokens) vs uniform  the run's generated rollouts (tokens) over uniform's of the
                                 same seed, in the same number of steps
    waves/step, rounds/step      generation waves (DAPO: the first submission and its refills) and
                                 allocator rounds of M prompts drawn, per step
    rollouts (tokens) to target  generated rollouts (tokens) until held-out accuracy first reaches
                                 uniform's final accuracy of the same seed; mean over the seeds
                                 that do (k/n of them), or "not reached"
    ratio                        that compute over uniform's own to the same accuracy (same seed),
                                 over the seeds where both reach it
    Δ AUC rollouts (tokens)      mean held-out accuracy over the first X generated rollouts
                                 (tokens) minus uniform's, X the smaller of the two runs' totals
                                 of the seed: accuracy per generated compute on a common range

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


def _curve(rs: list[dict[str, Any]], start: float | None, x: str = "rollouts") -> list[tuple[float, float]]:
    """[(x, held-out accuracy)] of one run of one seed, from the warm start (x = 0) when known; ``x``
    is a cumulative count of the rows (``rollouts`` trained, ``rollouts_generated``,
    ``tokens_generated``), NaN in rows that lack it."""
    head = [] if start is None or math.isnan(start) else [(0.0, start)]
    return head + [(float(r.get(x, math.nan)), r["eval_acc"]) for r in rs if not math.isnan(r["eval_acc"])]


def auc_until(curve: list[tuple[float, float]], end: float) -> float:
    """Mean accuracy over [0, ``end``] of the piecewise-linear curve from its first point: the area
    under it up to ``end`` (interpolated) divided by the range. NaN when the curve does not start at
    0 or ends before ``end``."""
    if len(curve) < 2 or curve[0][0] != 0 or not end > 0:
        return float("nan")
    x, y = np.asarray(curve, dtype=np.float64).T
    if np.isnan(x).any() or x[-1] < end - 1e-9:
        return float("nan")
    inside = x < end
    xs = np.r_[x[inside], end]
    ys = np.r_[y[inside], np.interp(end, x, y)]
    return float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2) / end)


def compute_to_target(curve: list[tuple[float, float]], target: float) -> float:
    """The x of the first evaluation whose accuracy reaches ``target`` (NaN: not reached).

    ``compute_to_target([(0, 0.2), (100, 0.4), (200, 0.5)], 0.45)`` -> 200.0. Evaluations are
    points: the compute is that of the first evaluated step at or above the target, not an
    interpolation between two evaluations.
    """
    return next((float(x) for x, acc in curve if acc >= target - 1e-12), float("nan"))


def _auc(curve: list[tuple[float, float]]) -> float:
    if len(curve) < 2:
        return float("nan")
    x, y = np.asarray(curve, dtype=np.float64).T
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / (x[-1] - x[0]))


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
        reach = [compute_to_target(curves[s], ref_curves[s][-1][1]) for s in paired if label != reference]
        reached = [x for x in reach if not math.isnan(x)]
        every = [r for s in seeds for r in by_seed[s]]
        compute = _compute(label, by_seed, every, runs.get(reference, {}), start, reference)
        out.append(
            {
                "run": label,
                "seeds": len(seeds),
                "steps": int(min(by_seed[s][-1]["step"] for s in seeds)),
                "rollouts_per_step": int(
                    round(np.mean([r.get("step_rollouts_trained", r["total_budget"]) for r in every]))
                ),
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
                **compute,
            }
        )
    return out


def paired_deltas(
    rows: list[dict[str, Any]], label: str, reference: str = "uniform"
) -> dict[int, dict[str, float]]:
    """Per seed run by both ``label`` and ``reference``: {seed: {d_final, d_auc}}, the same
    differences `summarise` averages (final held-out accuracy; AUC over trained rollouts)."""
    runs, start = _by_run(rows)
    out: dict[int, dict[str, float]] = {}
    for seed, rs in sorted(runs.get(label, {}).items()):
        ref = runs.get(reference, {}).get(seed)
        if not ref:
            continue
        curve, ref_curve = _curve(rs, start.get(seed)), _curve(ref, start.get(seed))
        out[seed] = {
            "d_final": curve[-1][1] - ref_curve[-1][1],
            "d_auc": _auc(curve) - _auc(ref_curve),
        }
    return out


#: The compute counts of `compute_summary`: (row key, name in the summary).
COMPUTE_UNITS = (("rollouts_generated", "rollouts"), ("tokens_generated", "tokens"))


def _compute(
    label: str,
    by_seed: dict[int, list[dict[str, Any]]],
    every: list[dict[str, Any]],
    ref_by_seed: dict[int, list[dict[str, Any]]],
    start: dict[int, float],
    reference: str,
) -> dict[str, Any]:
    """What one run generated, and the compute it needed to reach the reference's final accuracy.

    Per seed s with a reference run: target_s = the reference's final held-out accuracy of seed s;
    ``{u}_to_target`` = the generated rollouts (tokens) at the run's first evaluation at or above
    target_s (`compute_to_target`), mean and 95 % t-interval over the seeds that reached it, with
    how many did; ``{u}_to_target_ratio`` = that compute over the reference's own (the reference
    reaches its final at its last evaluation or earlier), over the seeds where both reached it;
    ``d_auc_{u}`` = the paired difference of mean accuracy over [0, X_s], X_s the smaller of the two
    runs' total generated compute of seed s (`auc_until`), so both are compared on the same range.
    Also: generated rollouts and tokens per step, generated rollouts per trained rollout, generation
    waves (submissions) and allocator rounds per step, and ``gen_{u}_ratio``: the run's total
    generated rollouts (tokens) over the reference's, paired by seed (runs of equal steps).
    ``every`` is the run's rows of all its seeds, in seed order.
    """
    seeds = sorted(by_seed)
    out: dict[str, Any] = {}

    def per_step(key: str) -> float:
        vals = [r[key] for r in every if key in r]
        return float(np.mean(vals)) if vals else float("nan")

    out["gen_rollouts_per_step"] = per_step("step_rollouts_generated")
    out["gen_tokens_per_step"] = per_step("step_tokens_generated")
    trained = per_step("step_rollouts_trained")
    out["gen_per_trained"] = out["gen_rollouts_per_step"] / trained if trained else float("nan")
    out["submissions_per_step"] = per_step("submissions")
    out["rounds_per_step"] = per_step("rounds")
    paired = [s for s in seeds if ref_by_seed.get(s)]
    for key, unit in COMPUTE_UNITS:
        ratios = [
            by_seed[s][-1][key] / ref_by_seed[s][-1][key]
            for s in paired
            if key in by_seed[s][-1]
            and ref_by_seed[s][-1].get(key)
            and len(by_seed[s]) == len(ref_by_seed[s])
        ]
        out[f"gen_{unit}_ratio"] = t_interval(ratios)
        reach, ratio, d_auc = [], [], []
        for s in paired:
            curve_x = _curve(by_seed[s], start.get(s), key)
            ref_x = _curve(ref_by_seed[s], start.get(s), key)
            target = ref_x[-1][1]  # the reference's final accuracy (the same evaluations whatever x)
            x = compute_to_target(curve_x, target)
            reach.append(x)
            own = compute_to_target(ref_x, target)
            if not math.isnan(x) and not math.isnan(own) and own > 0:
                ratio.append(x / own)
            if label != reference and curve_x and ref_x:
                end = min(curve_x[-1][0], ref_x[-1][0])
                d_auc.append(auc_until(curve_x, end) - auc_until(ref_x, end))
        reached = [x for x in reach if not math.isnan(x)]
        out[f"{unit}_to_target"] = t_interval(reached)
        out[f"{unit}_to_target_reached"] = len(reached)
        out[f"{unit}_to_target_ratio"] = t_interval(ratio)
        out[f"d_auc_{unit}"] = t_interval(d_auc) if label != reference else (float("nan"), float("nan"))
    out["compute_paired_seeds"] = len(paired)
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


def _reach(s: dict[str, Any], unit: str) -> str:
    """``1,234 [1,000, 1,468] (3/5)``, or ``not reached (0/5)``."""
    n = s["compute_paired_seeds"]
    if not n:
        return "-"
    k = s[f"{unit}_to_target_reached"]
    if not k:
        return f"not reached (0/{n})"
    return f"{_ci(s[f'{unit}_to_target'], ',.0f')} ({k}/{n})"


def format_compute(summary: list[dict[str, Any]], reference: str = "uniform") -> str:
    """The compute table as Markdown: generation per step and compute to the reference's final."""
    head = (
        f"| run | gen rollouts/step | gen tokens/step | gen/trained | gen rollouts vs {reference} "
        f"| gen tokens vs {reference} | waves/step | rounds/step "
        f"| rollouts to {reference}'s final | ratio | tokens to {reference}'s final | ratio "
        f"| Δ AUC rollouts | Δ AUC tokens |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in summary:
        if "gen_rollouts_per_step" not in s:
            continue
        lines.append(
            f"| {s['run']} | {s['gen_rollouts_per_step']:,.1f} | {s['gen_tokens_per_step']:,.0f} "
            f"| {s['gen_per_trained']:.2f} | {_ci(s['gen_rollouts_ratio'], '.3f')} "
            f"| {_ci(s['gen_tokens_ratio'], '.3f')} | {s['submissions_per_step']:.2f} "
            f"| {s['rounds_per_step']:.2f} "
            f"| {_reach(s, 'rollouts')} | {_ci(s['rollouts_to_target_ratio'], '.2f')} "
            f"| {_reach(s, 'tokens')} | {_ci(s['tokens_to_target_ratio'], '.2f')} "
            f"| {_ci(s['d_auc_rollouts'], signed=True)} | {_ci(s['d_auc_tokens'], signed=True)} |"
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
        f"Comparison:\n\n{format_table(summary, reference)}\n\n"
        f"Compute:\n\n{format_compute(summary, reference)}\n\nRegime:\n\n{format_regime(reg)}"
    )
