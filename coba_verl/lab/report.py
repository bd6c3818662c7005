"""Summary statistics of a lab run folder: per run label, aggregated over seeds.

Columns of the summary table:

    final acc     held-out avg@k at the last step, mean ± std over seeds
    gain          final acc minus the warm start's (same seed), mean over seeds
    rollouts to uniform   training rollouts until held-out accuracy first reaches uniform's
                  final accuracy of the same seed (mean over the seeds where it does; "-" if never)
    zero-grad     share of prompt groups whose rollouts all pass or all fail (no GRPO signal)
    plugin        allocation + observe + end_step time as a share of the step's wall time
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

__all__ = ["summarise", "format_table"]


def _mean_std(xs: list[float]) -> tuple[float, float]:
    a = np.asarray([x for x in xs if not math.isnan(x)], dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def _first_reach(evals: list[tuple[int, float]], target: float) -> float:
    for rollouts, acc in evals:
        if acc >= target - 1e-12:
            return float(rollouts)
    return float("nan")


def summarise(rows: list[dict[str, Any]], reference: str = "uniform") -> list[dict[str, Any]]:
    """One dict per run label (in first-seen order) from metrics rows.

    Rows with ``step == 0`` are the warm start's evaluation (shared by all runs of a seed).
    """
    by: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    start: dict[int, float] = {}
    labels: list[str] = []
    for r in rows:
        if r["step"] == 0:
            start[r["seed"]] = r["eval_acc"]
            continue
        if r["run"] not in labels:
            labels.append(r["run"])
        by[(r["run"], r["seed"])].append(r)

    def evals(label: str, seed: int) -> list[tuple[int, float]]:
        out = [(0, start[seed])] if seed in start else []
        return out + [
            (r["rollouts"], r["eval_acc"]) for r in by[(label, seed)] if not math.isnan(r["eval_acc"])
        ]

    out: list[dict[str, Any]] = []
    for label in labels:
        seeds = sorted(s for (lb, s) in by if lb == label)
        finals, gains, reach, zero, plug, step_s, steps = [], [], [], [], [], [], []
        for s in seeds:
            rs = by[(label, s)]
            ev = evals(label, s)
            final = ev[-1][1] if ev else float("nan")
            finals.append(final)
            gains.append(final - start.get(s, float("nan")))
            ref = evals(reference, s) if (reference, s) in by else []
            if ref and label != reference:
                reach.append(_first_reach(ev, ref[-1][1]))
            elif ref:
                reach.append(float(ref[-1][0]) if ref else float("nan"))
            zero.append(float(np.mean([r["zero_grad_share"] for r in rs])))
            plug.append(float(np.sum([r["plugin_s"] for r in rs]) / np.sum([r["step_s"] for r in rs])))
            step_s.append(float(np.mean([r["step_s"] for r in rs])))
            steps.append(rs[-1]["step"])
        reached = [x for x in reach if not math.isnan(x)]
        out.append(
            {
                "run": label,
                "seeds": len(seeds),
                "steps": int(min(steps)),
                "rollouts": int(by[(label, seeds[0])][-1]["rollouts"]),
                "final_acc_mean": _mean_std(finals)[0],
                "final_acc_std": _mean_std(finals)[1],
                "gain_mean": _mean_std(gains)[0],
                "rollouts_to_ref_mean": float(np.mean(reached)) if reached else float("nan"),
                "rollouts_to_ref_reached": len(reached),
                "zero_grad_share": _mean_std(zero)[0],
                "plugin_share": _mean_std(plug)[0],
                "step_s": _mean_std(step_s)[0],
            }
        )
    return out


def format_table(summary: list[dict[str, Any]], reference: str = "uniform") -> str:
    """A fixed-width text table of `summarise`'s output."""
    head = (
        f"{'run':<14} {'seeds':>5} {'rollouts':>9} {'final acc':>15} {'gain':>7} "
        f"{'rollouts to ' + reference:>22} {'zero-grad':>9} {'plugin':>8} {'s/step':>7}"
    )
    lines = [head, "-" * len(head)]
    for s in summary:
        acc = f"{s['final_acc_mean']:.3f} ± {s['final_acc_std']:.3f}"
        if math.isnan(s["rollouts_to_ref_mean"]):
            reach = "not reached"
        else:
            reach = f"{s['rollouts_to_ref_mean']:,.0f} ({s['rollouts_to_ref_reached']}/{s['seeds']})"
        lines.append(
            f"{s['run']:<14} {s['seeds']:>5} {s['rollouts']:>9,} {acc:>15} {s['gain_mean']:>+7.3f} "
            f"{reach:>22} {s['zero_grad_share']:>9.1%} {s['plugin_share']:>8.3%} {s['step_s']:>7.3f}"
        )
    return "\n".join(lines)
