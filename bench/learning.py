"""Learning benchmark: does the allocation help a model that really learns? (CPU lab, several seeds.)

    python bench/learning.py              # 3 seeds x {uniform, knapsack, coba, coba_release, coba@0.5}
    python bench/learning.py --seeds 0,1,2,3,4 --publish docs/lab

Every run of a seed starts from the same warm start, sees the same prompts in the same order
and is evaluated with the same random numbers; runs differ only in how the step's rollouts are
spread over its prompts (``coba@0.5`` gets half of them). Printed, per strategy:

* held-out accuracy (avg@k at temperature 1) at the end, mean ± std over seeds, and the paired
  difference to uniform of the same seed;
* training rollouts until held-out accuracy first reaches uniform's final accuracy (same seed);
* the allocator's own time per step (allocate + observe + end_step) and its share of the step.

This is a benchmark, not a test: it takes tens of minutes on 2 cores and reports whatever it
measures. The run folder (metrics, plots) is kept; ``--publish DIR`` also copies the plots and
writes ``DIR/benchmark.md`` with the table and the command.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from coba_verl.lab.config import LabConfig
from coba_verl.lab.experiment import read_metrics, run_lab

RUNS = ["uniform", "knapsack", "coba", "coba_release", "coba@0.5"]


def paired_table(folder: Path, reference: str = "uniform") -> str:
    """The benchmark table from a run folder's metrics."""
    rows = read_metrics(folder)
    start = {r["seed"]: r["eval_acc"] for r in rows if r["step"] == 0}
    runs: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["step"] > 0:
            runs[r["run"]][r["seed"]].append(r)

    def final(rs: list[dict]) -> float:
        return [r["eval_acc"] for r in rs if not math.isnan(r["eval_acc"])][-1]

    def reach(rs: list[dict], seed: int, target: float) -> float:
        if start.get(seed, -1.0) >= target:
            return 0.0
        for r in rs:
            if not math.isnan(r["eval_acc"]) and r["eval_acc"] >= target:
                return float(r["rollouts"])
        return float("nan")

    ref = {s: final(rs) for s, rs in runs.get(reference, {}).items()}
    head = (
        f"| run | seeds | rollouts/step | final held-out acc | Δ vs {reference} (paired) | "
        f"rollouts to {reference}'s final acc | zero-grad groups | plugin ms/step | plugin share |"
    )
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    start_acc = np.mean(list(start.values())) if start else float("nan")
    lines.append(f"| warm start | {len(start)} | - | {start_acc:.3f} | - | - | - | - | - |")
    for label, by_seed in runs.items():
        seeds = sorted(by_seed)
        finals = np.array([final(by_seed[s]) for s in seeds])
        deltas = np.array([final(by_seed[s]) - ref[s] for s in seeds if s in ref])
        reached = [reach(by_seed[s], s, ref[s]) for s in seeds if s in ref]
        ok = [x for x in reached if not math.isnan(x)]
        all_rows = [r for s in seeds for r in by_seed[s]]
        plugin = np.array([r["plugin_s"] for r in all_rows])
        step = np.array([r["step_s"] for r in all_rows])
        zero = np.mean([r["zero_grad_share"] for r in all_rows])
        sd = finals.std(ddof=1) if finals.size > 1 else 0.0
        dsd = deltas.std(ddof=1) if deltas.size > 1 else 0.0
        delta = f"{deltas.mean():+.3f} ± {dsd:.3f}" if label != reference and deltas.size else "-"
        reach_txt = (
            f"{np.mean(ok):,.0f} ({len(ok)}/{len(reached)} seeds)"
            if ok
            else f"not reached (0/{len(reached)})"
        )
        lines.append(
            f"| {label} | {len(seeds)} | {all_rows[0]['total_budget']} | {finals.mean():.3f} ± {sd:.3f} "
            f"| {delta} | "
            f"{reach_txt} | {zero:.1%} | {plugin.mean() * 1e3:.2f} | {plugin.sum() / step.sum():.2%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (>= 3 for the report)")
    p.add_argument("--runs", default=",".join(RUNS), help="strategy labels, as for `coba-verl lab --runs`")
    p.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the lab's)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bench-learning-<time>)")
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "coba_verl" / "lab")
    p.add_argument(
        "--publish", type=Path, default=None, help="copy plots and write benchmark.md into this folder"
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        force=True,
    )
    logging.getLogger("verl").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    kw = {
        "runs": args.runs.split(","),
        "seeds": [int(s) for s in args.seeds.split(",")],
        "threads": args.threads,
    }
    if args.steps:
        kw["steps"] = args.steps
    try:
        cfg = LabConfig(**kw)
    except ValueError as err:
        p.error(str(err))
    out = args.out or Path("runs") / time.strftime("bench-learning-%Y%m%d-%H%M%S")
    outcome = run_lab(cfg, out, cache_dir=args.cache_dir, progress=sys.stderr.isatty())
    table = paired_table(outcome.folder)
    command = "python bench/learning.py " + " ".join(argv if argv is not None else sys.argv[1:])
    footer = (
        f"{outcome.status}: {len(cfg.seeds)} seeds x {len(cfg.runs)} runs x {cfg.steps} steps "
        f"(M={cfg.prompts_per_step}, n={cfg.rollouts_per_prompt}) in {outcome.wall_s / 60:.1f} min, "
        f"peak RSS {outcome.peak_rss_mb:.0f} MB, torch threads {torch.get_num_threads()}"
    )
    sys.stdout.write(f"{table}\n\n{footer}; run folder {outcome.folder}\n")
    if args.publish is not None:
        args.publish.mkdir(parents=True, exist_ok=True)
        for name in ("accuracy_vs_rollouts.png", "budget_vs_pass_rate.png", "overview.png"):
            src = outcome.folder / "plots" / name
            if src.exists():
                shutil.copyfile(src, args.publish / name)
        (args.publish / "benchmark.md").write_text(f"Command: `{command.strip()}`\n\n{table}\n\n{footer}\n")
    return 0 if outcome.status == "finished" else 130


if __name__ == "__main__":
    sys.exit(main())
