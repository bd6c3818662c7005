"""The sizes study's trend test: does CoBA's gap to uniform GRPO change with the model's size?

    python bench/sizes_trend.py --size S1=runs/paper --size S2=runs/s2 --size S3=runs/s3 \
        --beside "S1x2=runs/paper_long" --png docs/lab/sizes/trend.png

Each ``--size NAME=FOLDER[,FOLDER][:STEPS]`` is a lab run folder (``bench/learning.py --out``;
several when seeds ran apart; ``:STEPS`` reads its steps up to STEPS only) holding uniform and the
compared run (``--run``, default coba) on the same seeds; the parameter count is that of the lab's
model built from the folder's config (`coba_verl.lab.seeds.new_model`). Per seed, the
least-squares slope of Δ AUC (and of Δ final) over log10(parameters) across the sizes; the study's
slope is the mean of the per-seed slopes with its 95 % t-interval (docs/lab/sizes_design.md,
"Trend test"). ``--beside`` folders are reported in the table, not in the slope. Prints a markdown
table; ``--png`` draws Δ final and Δ AUC against the parameter count with their intervals,
uniform's F̄ end beside each size.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

import numpy as np

from coba_verl.arithmetic.tokenizer import build_tokenizer
from coba_verl.lab.config import LabConfig
from coba_verl.lab.experiment import read_metrics
from coba_verl.lab.report import paired_deltas, regime, t_interval
from coba_verl.lab.seeds import new_model

logger = logging.getLogger(__name__)


def _named(text: str) -> tuple[str, tuple[list[Path], int | None]]:
    name, eq, folders = text.partition("=")
    folders, colon, until = folders.partition(":")
    if not eq or not name or not folders or (colon and not until.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=FOLDER[,FOLDER][:STEPS], e.g. S2=runs/s2")
    return name, ([Path(f) for f in folders.split(",")], int(until) if colon else None)


def _size(where: tuple[list[Path], int | None], run: str) -> dict:
    """The folders' parameter count (the first's config), per-seed deltas of ``run`` and uniform's
    F̄ end; several folders of one size (seeds run apart) are read as one, a (run, seed, step)
    row read once."""
    folders, until = where
    doc = json.loads((folders[0] / "config.json").read_text())
    cfg = LabConfig(**{k: v for k, v in doc["lab"].items() if k in LabConfig.__dataclass_fields__})
    seen: set[tuple] = set()
    rows = []
    for folder in folders:
        for r in read_metrics(folder):
            if (r["run"], r["seed"], r["step"]) not in seen and (until is None or r["step"] <= until):
                seen.add((r["run"], r["seed"], r["step"]))
                rows.append(r)

    deltas = paired_deltas(rows, run)
    if not deltas:
        raise SystemExit(f"{folders}: no seed has both uniform and {run!r}; run both there first.")
    fbar = {r["run"]: r for r in regime(rows)}
    return {
        "params": sum(t.numel() for t in new_model(cfg, build_tokenizer(), 0).parameters()),
        "deltas": deltas,
        "f_end": fbar.get("uniform", {}).get("f_bar_end", math.nan),
        "f_end_run": fbar.get(run, {}).get("f_bar_end", math.nan),
    }


def slopes(sizes: list[dict], key: str) -> list[float]:
    """Per seed present at every size: the least-squares slope of ``key`` over log10(parameters)."""
    seeds = sorted(set.intersection(*(set(s["deltas"]) for s in sizes)))
    x = np.log10([s["params"] for s in sizes])
    return [float(np.polyfit(x, [s["deltas"][seed][key] for s in sizes], 1)[0]) for seed in seeds]


def _ci(mean_half: tuple[float, float], digits: int = 3) -> str:
    m, h = mean_half
    return f"{m:+.{digits}f} [{m - h:+.{digits}f}, {m + h:+.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=_named, action="append", required=True, help="NAME=FOLDER, in the slope")
    p.add_argument("--beside", type=_named, action="append", default=[], help="NAME=FOLDER, table only")
    p.add_argument("--run", default="coba", help="the run compared with uniform")
    p.add_argument("--png", type=Path, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sizes = {name: _size(folder, args.run) for name, folder in args.size}
    beside = {name: _size(folder, args.run) for name, folder in args.beside}
    lines = [
        f"| size | parameters | seeds | Δ final ({args.run} − uniform) | Δ AUC | uniform F̄ end "
        f"| {args.run} F̄ end |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in {**sizes, **beside}.items():
        d = s["deltas"].values()
        lines.append(
            f"| {name}{'' if name in sizes else ' (beside)'} | {s['params']:,} | {len(d)} "
            f"| {_ci(t_interval([x['d_final'] for x in d]))} | {_ci(t_interval([x['d_auc'] for x in d]))} "
            f"| {s['f_end']:.2f} | {s['f_end_run']:.2f} |"
        )
    if len(sizes) >= 2:
        for key, title in (("d_auc", "Δ AUC"), ("d_final", "Δ final")):
            per_seed = slopes(list(sizes.values()), key)
            lines.append(
                f"\nSlope of {title} over log10(parameters), mean of {len(per_seed)} per-seed slopes "
                f"(95 % t, {len(per_seed) - 1} df): {_ci(t_interval(per_seed), 4)}; per seed "
                + ", ".join(f"{x:+.4f}" for x in per_seed)
            )
    sys.stdout.write("\n".join(lines) + "\n")
    if args.png is not None:
        _plot(sizes, beside, args.run, args.png)
    return 0


def _plot(sizes: dict[str, dict], beside: dict[str, dict], run: str, png: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    panels = (("d_final", "Δ final held-out accuracy"), ("d_auc", "Δ AUC"))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for group, marker, shift, dy in ((sizes, "o", 1.0, 6), (beside, "s", 1.15, -22)):
            for name, s in group.items():
                m, h = t_interval([x[key] for x in s["deltas"].values()])
                x = s["params"] * shift  # a size reported beside sits just right of its twin
                ax.errorbar(x, m, yerr=0 if math.isnan(h) else h, fmt=marker, capsize=4)
                ax.annotate(f"{name}\nF̄ end {s['f_end']:.2f}", (x, m), textcoords="offset points",
                            xytext=(6, dy), fontsize=8)  # fmt: skip
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("parameters")
        ax.set_title(f"{title}, {run} − uniform (95 % t)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    logger.info("wrote %s", png)


if __name__ == "__main__":
    sys.exit(main())
