"""Learning benchmark: does per-prompt allocation help a model that really learns? (CPU lab, 5 seeds.)

    python bench/learning.py --scenario paper --publish docs/lab
    python bench/learning.py --scenario hard --publish docs/lab
    python bench/learning.py --scenario paper --seeds 0,1 --runs uniform,coba   # a quick look
    python bench/learning.py --scenario paper --runs uniform,coba,coba:proportional \
        --publish docs/lab --name group_weight_paper          # a study of its own, beside paper.md

Every run of a seed starts from the same warm start, sees the same prompts in the same order and
is evaluated with the same random numbers; runs differ only in how the step's rollouts are spread
over its prompts (``@0.5`` = half of them). Printed: the lab's comparison table (final accuracy,
AUC, paired differences to uniform with 95 % t-intervals over seeds, rollouts to reach uniform's
final accuracy, zero-variance shares), the regime table (F̄, α_t, pass-rate histograms), wall time
and peak RSS.

This is a benchmark, not a test: it takes tens of minutes on 2 cores and reports whatever it
measures. ``--publish DIR`` writes ``DIR/<name>.md`` (command, commit, tables, cost) and copies
the plots to ``DIR/<name>/``; ``--name`` defaults to the scenario, so a study that is not the
scenario's benchmark must pass its own name to leave the published ``<scenario>.md`` alone. A
run label ``strategy:equal`` sets ``coba.group_weight`` for that run (`coba_verl.lab.config`).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from coba_verl.lab.config import LabConfig
from coba_verl.lab.experiment import run_lab
from coba_verl.lab.plots import PLOT_FILES
from coba_verl.lab.report import LEGEND
from coba_verl.lab.scenarios import DEFAULT_SCENARIO, SCENARIOS

RUNS = "uniform,uniform@0.5,knapsack,coba,coba_release,coba@0.5"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scenario", choices=list(SCENARIOS), default=DEFAULT_SCENARIO, help="lab preset")
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (5+ for the published table)")
    p.add_argument("--runs", default=RUNS, help="strategy labels, as for `coba-verl lab --runs`")
    p.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the scenario's)")
    p.add_argument("--device", default=None, help="torch device (default: the scenario's)")
    p.add_argument(
        "--rollouts-per-prompt", type=int, default=None, help="n of uniform GRPO (default: the scenario's)"
    )
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/bench-<scenario>-<time>)")
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "coba_verl" / "lab")
    p.add_argument(
        "--publish", type=Path, default=None, help="write <scenario>.md and plots into this folder"
    )
    p.add_argument(
        "--name", default=None, help="file name (no .md) of the published table [default: the scenario]"
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
    if args.device:
        kw["device"] = args.device
    if args.rollouts_per_prompt:
        kw["rollouts_per_prompt"] = args.rollouts_per_prompt
    try:
        cfg = LabConfig.from_scenario(args.scenario, **kw)
    except ValueError as err:
        p.error(str(err))
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"device {cfg.device}: torch sees no CUDA device here; use --device cpu.")
    out = args.out or Path("runs") / time.strftime(f"bench-{args.scenario}-%Y%m%d-%H%M%S")
    outcome = run_lab(cfg, out, cache_dir=args.cache_dir, progress=sys.stderr.isatty())
    command = "python bench/learning.py " + " ".join(sys.argv[1:] if argv is None else argv)
    footer = (
        f"{outcome.status}: {len(cfg.seeds)} seeds x {len(cfg.runs)} runs x {cfg.steps} steps "
        f"(M={cfg.prompts_per_step}, n={cfg.rollouts_per_prompt}, {cfg.updates_per_step} updates per step) "
        f"in {outcome.wall_s / 60:.1f} min, peak RSS {outcome.peak_rss_mb:.0f} MB, device {cfg.device}, "
        f"torch threads {torch.get_num_threads()}"
    )
    body = outcome.table.replace(LEGEND, "").rstrip()
    sys.stdout.write(f"{body}\n\n{footer}; run folder {outcome.folder}\n")
    if args.publish is not None:
        stem = args.name or args.scenario
        dest = args.publish / stem
        dest.mkdir(parents=True, exist_ok=True)
        for name in PLOT_FILES:
            src = outcome.folder / "plots" / name
            if src.exists():
                shutil.copyfile(src, dest / name)
        title = (
            f"Lab benchmark, scenario `{args.scenario}`"
            if stem == args.scenario
            else f"Lab study `{stem}`, scenario `{args.scenario}`"
        )
        (args.publish / f"{stem}.md").write_text(
            f"# {title}\n\n"
            f"Command: `{command.strip()}` (commit {_commit()})\n\n{footer}\n\n{body}\n\n"
            f"Columns:\n\n```\n{LEGEND}\n```\n\n"
            + "".join(f"![{n}]({stem}/{n})\n\n" for n in PLOT_FILES if (dest / n).exists())
        )
    return 0 if outcome.status == "finished" else 130


if __name__ == "__main__":
    sys.exit(main())
