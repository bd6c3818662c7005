"""The headroom study's report: how much any allocation gains over uniform, and CoBA's share of it.

    python bench/headroom.py runs/headroom-paper runs/headroom-paper_s2-a runs/headroom-paper_s2-b \
        runs/headroom-dapo-a runs/headroom-dapo-b --png docs/lab/headroom/delta_auc.png \
        --data docs/data/headroom

Each argument is a lab run folder (``bench/learning.py --out``) holding ``uniform`` and the compared
labels on some seeds; folders of the same scenario (their ``config.json``, or NAME in ``NAME=FOLDER``)
are read as one. Per
scenario (docs/lab/headroom_design.md, "Measures"):

* every label's Δ final and Δ AUC against uniform, paired by seed, with 95 % t-intervals;
* the headroom: the Δ AUC of the oracle with the largest mean (``+oracle`` labels), and whether its
  interval lies above 0; CoBA's and Knapsack-RL's shares of it (mean over mean, only where it does)
  and the paired difference to the best oracle;
* the shipped tracker's estimates against the exact pass rates, over the allocations of epoch 2 on
  (at least one prompt with history): mean absolute error, Spearman's rho, the share of prompts at
  p̂ = 0 or 1 whose exact p is in (0.05, 0.95), the share of rollouts CoBA moves with p instead of p̂.

Prints markdown tables; ``--png`` draws Δ AUC of every label per scenario with its interval;
``--data`` writes each scenario's per-seed figures as JSON (the tables recompute from them).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from coba_verl.lab.experiment import read_metrics
from coba_verl.lab.report import paired_deltas, t_interval

ORACLE = "+oracle"
#: Labels whose estimates are tabled (the shipped tracker of a shipped run and of the reference).
ESTIMATED = ("uniform", "coba", "knapsack")


def _scenario(folder: Path) -> str:
    return json.loads((folder / "config.json").read_text())["lab"]["scenario"]


def _rows_by_scenario(folders: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Rows per scenario; ``NAME=FOLDER`` files a folder under NAME (runs of a scenario made before
    it had its name, e.g. with the flags it was frozen from)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for arg in folders:
        name, eq, path = arg.rpartition("=")
        folder = Path(path)
        out[name if eq else _scenario(folder)].extend(read_metrics(folder))
    return dict(out)


def _ci(mean_half: tuple[float, float]) -> str:
    mean, half = mean_half
    if math.isnan(half):
        return f"{mean:+.3f}"
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"


def _estimation(rows: list[dict[str, Any]], label: str) -> dict[str, float]:
    """Means over the label's steps with an allocation of at least one prompt with history."""
    rs = [r for r in rows if r.get("run") == label and r["step"] > 0 and (r.get("est_seen") or 0) > 0]
    if not rs:
        return {}
    extreme = sum(r["est_extreme"] for r in rs)
    return {
        "mae": float(np.nanmean([r["est_mae"] for r in rs])),
        "rank_corr": float(np.nanmean([r["est_rank_corr"] for r in rs])),
        "extreme_share": extreme / sum(r["est_seen"] for r in rs),
        "extreme_wrong": sum(r["est_extreme_wrong"] for r in rs) / extreme if extreme else float("nan"),
        "budget_moved": float(np.nanmean([r["est_budget_moved"] for r in rs])),
        "bound_max": float(np.nanmax([r["exact_bound_max"] for r in rs])),
        "bound_median": float(np.nanmedian([r["exact_bound_max"] for r in rs])),
        "allocations": len(rs),
    }


def analyse(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The scenario's figures: per label per seed Δ final / Δ AUC, intervals, headroom, shares."""
    labels = list(dict.fromkeys(r["run"] for r in rows if r["step"] > 0))
    per_seed = {lab: paired_deltas(rows, lab) for lab in labels if lab != "uniform"}
    stats = {
        lab: {k: t_interval([d[k] for d in seeds.values()]) for k in ("d_final", "d_auc")}
        | {"seeds": len(seeds)}
        for lab, seeds in per_seed.items()
    }
    oracles = [lab for lab in per_seed if lab.endswith(ORACLE)]
    out: dict[str, Any] = {"labels": labels, "per_seed": per_seed, "stats": stats, "oracles": oracles}
    if oracles:
        best = max(oracles, key=lambda lab: stats[lab]["d_auc"][0])
        mean, half = stats[best]["d_auc"]
        found = bool(mean - half > 0)
        out.update(best=best, headroom=(mean, half), found=found)
        for shipped in ("coba", "knapsack"):
            if shipped not in per_seed:
                continue
            common = sorted(set(per_seed[shipped]) & set(per_seed[best]))
            diff = [per_seed[shipped][s]["d_auc"] - per_seed[best][s]["d_auc"] for s in common]
            share = stats[shipped]["d_auc"][0] / mean if found else float("nan")
            out[f"{shipped}_share"] = share
            out[f"{shipped}_minus_best"] = t_interval(diff)
    for shipped in ("coba", "knapsack"):  # what exact rates change in the shipped value: oracle - shipped
        oracle = shipped + ORACLE
        if shipped in per_seed and oracle in per_seed:
            common = sorted(set(per_seed[shipped]) & set(per_seed[oracle]))
            diff = [per_seed[oracle][s]["d_auc"] - per_seed[shipped][s]["d_auc"] for s in common]
            out[f"{shipped}_exact_gain"] = t_interval(diff)
    out["estimation"] = {lab: _estimation(rows, lab) for lab in labels if not lab.endswith(ORACLE)}
    return out


def format_scenario(name: str, a: dict[str, Any]) -> str:
    lines = [
        f"### `{name}`",
        "",
        "| run | seeds | Δ final vs uniform | Δ AUC vs uniform |",
        "|---|---|---|---|",
    ]
    for lab, s in a["stats"].items():
        lines.append(f"| {lab} | {s['seeds']} | {_ci(s['d_final'])} | {_ci(s['d_auc'])} |")
    if "best" in a:
        verdict = "found (interval above 0)" if a["found"] else "not found (interval not above 0)"
        lines += ["", f"Headroom: best oracle `{a['best']}`, Δ AUC {_ci(a['headroom'])}: {verdict}."]
        for shipped, name_ in (("coba", "CoBA"), ("knapsack", "Knapsack-RL")):
            if f"{shipped}_minus_best" not in a:
                continue
            share = a[f"{shipped}_share"]
            share_text = f"{share:.2f}" if not math.isnan(share) else "undefined (no headroom)"
            lines.append(
                f"{name_}'s share of it: {share_text}; {shipped} − best oracle in Δ AUC: "
                f"{_ci(a[f'{shipped}_minus_best'])}."
            )
    for shipped in ("coba", "knapsack"):
        if f"{shipped}_exact_gain" in a:
            lines.append(
                f"`{shipped}+oracle` − `{shipped}` in Δ AUC (exact p in place of p̂): "
                f"{_ci(a[f'{shipped}_exact_gain'])}."
            )
    est = {lab: e for lab, e in a["estimation"].items() if e and lab in ESTIMATED}
    if est:
        lines += [
            "",
            "| tracker of | allocations | p̂ MAE | Spearman ρ | at p̂ = 0 or 1 | of those, 0.05 < p < 0.95 "
            "| rollouts CoBA moves with p | bound on left-out paths: median / max of a step's largest |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for lab, e in est.items():
            lines.append(
                f"| {lab} | {e['allocations']} | {e['mae']:.3f} | {e['rank_corr']:.3f} "
                f"| {e['extreme_share']:.1%} | {e['extreme_wrong']:.1%} | {e['budget_moved']:.1%} "
                f"| {e['bound_median']:.1e} / {e['bound_max']:.1e} |"
            )
    return "\n".join(lines)


def draw(analyses: dict[str, dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(analyses), figsize=(4.2 * len(analyses), 3.8), squeeze=False, sharey=True, sharex=True
    )
    order = list(dict.fromkeys(lab for a in analyses.values() for lab in a["stats"]))
    order.sort(key=lambda lab: lab.endswith(ORACLE))  # shipped first, oracles below; one row per label
    for ax, (name, a) in zip(axes[0], analyses.items(), strict=True):
        labels = [lab for lab in order if lab in a["stats"]]
        means = [a["stats"][lab]["d_auc"][0] for lab in labels]
        halves = [a["stats"][lab]["d_auc"][1] for lab in labels]
        colors = ["tab:orange" if lab.endswith(ORACLE) else "tab:blue" for lab in labels]
        y = np.asarray([order.index(lab) for lab in labels])
        ax.errorbar(means, y, xerr=halves, fmt="none", ecolor="gray", capsize=3)
        ax.scatter(means, y, c=colors, zorder=3)
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks(range(len(order)), order)
        ax.set_title(f"{name} ({a['stats'][labels[0]]['seeds']} seeds)")
        ax.set_xlabel("Δ AUC vs uniform (95 % CI)")
    axes[0][0].invert_yaxis()
    fig.suptitle("Shipped allocations (blue) and oracles fed the exact pass rates (orange)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "folders",
        nargs="+",
        help="lab run folders (bench/learning.py --out); NAME=FOLDER files one under NAME",
    )
    p.add_argument("--png", type=Path, default=None, help="draw Δ AUC per label per scenario here")
    p.add_argument("--data", type=Path, default=None, help="write per-seed figures per scenario here")
    args = p.parse_args(argv)
    analyses = {name: analyse(rows) for name, rows in _rows_by_scenario(args.folders).items()}
    sys.stdout.write("\n\n".join(format_scenario(n, a) for n, a in analyses.items()) + "\n")
    if args.data is not None:
        args.data.mkdir(parents=True, exist_ok=True)
        for name, a in analyses.items():
            doc = {"scenario": name, "per_seed": a["per_seed"], "estimation": a["estimation"]}
            (args.data / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if args.png is not None:
        draw(analyses, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
