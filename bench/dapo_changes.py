"""The dapo_n16 study's tables and its default-picking rule, from the lab's run folders.

    python bench/dapo_changes.py --n 16=runs/n16/n16 --n 8=runs/n16/n8 --n 4=runs/n16/n4

Each ``--n N=FOLDER[,FOLDER]`` names the `bench/learning.py` run folders of the lab's ``dapo`` scenario at
``--rollouts-per-prompt N`` with the runs U (``uniform``), U-carry, C0 (``coba``), C-size, C-carry,
C-skip and C-best (docs/dapo_n16_design.md, amendment 1). Per run and n, paired by seed with the
95 % t-interval: (1) rollouts generated per trained rollout and its ratio to U's (to U-carry's for
a carry run), tokens likewise; (2) Δ AUC per generated rollout against U (mean held-out accuracy
over the same generated range, `coba_verl.lab.report`) and Δ final; (3) generated rollouts to U's
final accuracy over U's own. Then section 4's rule: among the C runs, the lowest measure 1 at
n = 16 among those whose measure-2 interval is not entirely below 0 at any n that ran.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from coba_verl.lab.experiment import read_metrics
from coba_verl.lab.report import summarise

#: The study's names for the lab's run labels, in the rule's order of simplicity (section 4).
NAMES = {
    "uniform": "U",
    "uniform+carry": "U-carry",
    "coba": "C0",
    "coba+size": "C-size",
    "coba+carry": "C-carry",
    "coba+skip": "C-skip",
    "coba+size+skip": "C-best (skip + size)",
    "coba+carry+skip": "C-best (skip + carry)",
}
SIMPLER = ["coba", "coba+size", "coba+carry", "coba+skip", "coba+size+skip", "coba+carry+skip"]


def _named(text: str) -> tuple[int, list[Path]]:
    n, eq, folders = text.partition("=")
    if not eq or not n.isdigit() or not folders:
        raise argparse.ArgumentTypeError(f"{text!r}: give N=FOLDER[,FOLDER], e.g. 16=runs/n16/n16")
    return int(n), [Path(f) for f in folders.split(",")]


def _rows(folders: list[Path]) -> list[dict]:
    """The folders' rows; a (run, seed, step) seen in an earlier folder is not read again (the warm
    start's step-0 rows, or a run repeated by a later bench call of the same seeds)."""
    seen, out = set(), []
    for folder in folders:
        rows = read_metrics(folder)
        if not rows:
            raise SystemExit(f"{folder}: no metrics.jsonl rows; run bench/learning.py there first.")
        for r in rows:
            key = (r["run"], r["seed"], r["step"])
            if key not in seen:
                seen.add(key)
                out.append(r)
    return out


def _ci(mean_half: tuple[float, float], digits: int = 3, signed: bool = False) -> str:
    m, h = mean_half
    if math.isnan(m):
        return "-"
    sign = "+" if signed else ""
    if math.isnan(h):
        return f"{m:{sign}.{digits}f}"
    return f"{m:{sign}.{digits}f} [{m - h:{sign}.{digits}f}, {m + h:{sign}.{digits}f}]"


def tables(folders: dict[int, list[Path]]) -> tuple[str, dict[int, dict[str, dict]]]:
    """Markdown tables per n, and {n: {label: row}} with the numbers the rule reads."""
    out, data = [], {}
    for n, folder in sorted(folders.items(), reverse=True):
        rows = _rows(folder)
        by_u = {s["run"]: s for s in summarise(rows, "uniform")}
        labels = [lab for lab in NAMES if lab in by_u]
        by_uc = {s["run"]: s for s in summarise(rows, "uniform+carry")} if "uniform+carry" in by_u else {}
        data[n] = {}
        out += [
            f"\n### n = {n} ({', '.join(map(str, folder))})\n",
            "| run | seeds | gen / trained | gen rollouts vs U | vs U-carry | gen tokens vs U "
            "| Δ AUC per gen rollout vs U | Δ final vs U | rollouts to U's final, vs U's own |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for lab in labels:
            s = by_u[lab]
            carry = by_uc.get(lab) if "carry" in lab and lab != "uniform+carry" else None
            data[n][lab] = {"ratio": s["gen_rollouts_ratio"], "d_auc": s["d_auc_rollouts"]}
            out.append(
                f"| {NAMES[lab]} (`{lab}`) | {s['seeds']} | {s['gen_per_trained']:.3f} "
                f"| {_ci(s['gen_rollouts_ratio']) if lab != 'uniform' else '1'} "
                f"| {_ci(carry['gen_rollouts_ratio']) if carry else '-'} "
                f"| {_ci(s['gen_tokens_ratio']) if lab != 'uniform' else '1'} "
                f"| {_ci(s['d_auc_rollouts'], signed=True)} | {_ci(s['d_final'], signed=True)} "
                f"| {_ci(s['rollouts_to_target_ratio'])} ({s['rollouts_to_target_reached']}/{s['seeds']}) |"
            )
    return "\n".join(out), data


def pick(data: dict[int, dict[str, dict]]) -> str:
    """Section 4's rule on what ran, as text."""
    if 16 not in data:
        return "n = 16 did not run: the rule cannot be applied."
    ns = sorted(data, reverse=True)
    lines = [f"\nThe rule (docs/dapo_n16_design.md, section 4) on n = {', '.join(map(str, ns))}:"]
    eligible = []
    for lab in SIMPLER:
        if lab not in data[16]:
            continue
        below = [n for n in ns if lab in data[n] and _entirely_below_zero(data[n][lab]["d_auc"])]
        mean = data[16][lab]["ratio"][0]
        lines.append(
            f"- {NAMES[lab]}: measure 1 at n = 16 = {mean:.3f} of U's; Δ AUC per generated rollout "
            + (f"entirely below 0 at n = {below}: out" if below else "not entirely below 0 at any n: in")
        )
        if not below:
            eligible.append(lab)
    if not eligible:
        return "\n".join([*lines, "No change is eligible: C0 stays."])
    best = min(eligible, key=lambda lab: data[16][lab]["ratio"][0])
    low = data[16][best]["ratio"][0]
    tied = [lab for lab in eligible if _covers(data[16][lab]["ratio"], low)]
    chosen = min(tied, key=SIMPLER.index)  # ties (intervals over the lowest's mean) go to the simpler
    lines.append(
        f"Lowest: {NAMES[best]} ({low:.3f}); intervals over it: {', '.join(NAMES[t] for t in tied)}; "
        f"picked (the simplest of those): **{NAMES[chosen]}**."
    )
    return "\n".join(lines)


def _covers(mean_half: tuple[float, float], x: float) -> bool:
    m, h = mean_half
    return abs(m - x) <= (0.0 if math.isnan(h) else h)


def _entirely_below_zero(mean_half: tuple[float, float]) -> bool:
    m, h = mean_half
    return not math.isnan(m) and not math.isnan(h) and m + h < 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=_named, action="append", required=True, help="N=FOLDER")
    p.add_argument("--png", type=Path, default=None, help="measure 1 against n, every run")
    args = p.parse_args(argv)
    text, data = tables(dict(args.n))
    sys.stdout.write(text + "\n" + pick(data) + "\n")
    if args.png is not None:
        _plot(data, args.png)
    return 0


def _plot(data: dict[int, dict[str, dict]], png: Path) -> None:
    """Rollouts generated per trained rollout, as a ratio to U's, against n: one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted(data)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k, lab in enumerate(lab for lab in NAMES if lab != "uniform" and any(lab in data[n] for n in ns)):
        have = [n for n in ns if lab in data[n]]
        mean = [data[n][lab]["ratio"][0] for n in have]
        half = [0.0 if math.isnan(data[n][lab]["ratio"][1]) else data[n][lab]["ratio"][1] for n in have]
        x = [n * (1 + 0.03 * (k - 3)) for n in have]  # spread the markers apart
        ax.errorbar(x, mean, yerr=half, marker="o", capsize=3, label=NAMES[lab])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(0.8, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("n (rollouts per prompt of uniform GRPO)")
    ax.set_ylabel("rollouts generated per trained, / U's")
    ax.set_title("Lab DAPO: generation to fill M x n, 5 seeds (95 % t)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
