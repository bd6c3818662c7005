"""Where CoBA's accuracy goes under DAPO: the lab's `dapo` scenario, CoBA against uniform and
against counterfactuals of the DAPO path (docs/lab/dapo_why_design.md, written before the runs).

    python bench/dapo_why.py --out /tmp/dapo_why --publish docs/lab
    python bench/dapo_why.py --out /tmp/dapo_why --tags uniform,coba --seeds 0,1   # a quick look

Each tag is one ``python -m coba_verl.lab --scenario dapo`` invocation with its own flags
(`TAGS`); the uniform one runs first and computes the seeds' warm starts into the shared cache,
the others then run ``--jobs`` at a time from it. Their rows are joined, each relabelled by its
tag, and compared paired by seed against ``uniform`` and against ``coba`` with the lab's own
report (95 % t-intervals over seeds), beside the trained batch's composition averaged over the
steps of epoch 2 and later. This is a benchmark: it reports whatever it measures.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from coba_verl.lab.experiment import read_metrics
from coba_verl.lab.report import format_compute, format_regime, format_table, regime, summarise, t_interval

logger = logging.getLogger("bench.dapo_why")

#: tag -> the lab flags of its run (the design's table).
TAGS: dict[str, list[str]] = {
    "uniform": ["--runs", "uniform"],
    "coba": ["--runs", "coba", "--dapo-cut", "spread"],
    "coba:proportional": ["--runs", "coba:proportional", "--dapo-cut", "spread"],
    "cut_random": ["--runs", "coba", "--dapo-cut", "random"],
    "whole_only": ["--runs", "coba", "--dapo-whole-only", "true", "--dapo-cut", "spread"],
    "b_low_4": ["--runs", "coba", "--coba", "min_rollouts=4", "--dapo-cut", "spread"],
    "b_up_32": ["--runs", "coba", "--coba", "max_rollouts=32", "--dapo-cut", "spread"],
}
#: Composition columns averaged per seed over the steps of epoch 2 and later: (row key, header).
COMPOSITION = (
    ("trained_groups", "groups trained"),
    ("trained_eff_groups", "effective groups (advantage mass)"),
    ("trained_top_mass", "largest group's mass share"),
    ("trained_size_mean", "mean trained group size"),
    ("trained_size_max", "largest trained group"),
    ("groups_cut", "groups cut"),
    ("rollouts_cut", "rollouts cut away"),
    ("trained_age_mean", "round age (steps)"),
    ("groups_evicted", "groups evicted"),
)


def _folder_name(tag: str) -> str:
    return tag.replace(":", "_")


def _launch(tag: str, args: argparse.Namespace) -> subprocess.Popen:
    out = args.out / _folder_name(tag)
    command = [
        sys.executable, "-m", "coba_verl.lab", "--scenario", "dapo", "--seeds", args.seeds,
        "--out", str(out), "--cache-dir", str(args.out / "cache"), "--no-progress", "-q", *TAGS[tag],
    ]  # fmt: skip
    log = open(args.out / f"{_folder_name(tag)}.log", "w")  # noqa: SIM115  (closed when the run ends)
    logger.info("%s: %s", tag, " ".join(command))
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def run_all(tags: list[str], args: argparse.Namespace) -> dict[str, float]:
    """Run every tag not yet finished (uniform first, then ``--jobs`` at a time); tag -> wall s."""
    todo = [t for t in tags if not (args.out / _folder_name(t) / "summary.txt").exists()]
    walls: dict[str, float] = {}
    if "uniform" in todo:  # the warm starts, computed once
        start = time.monotonic()
        if _launch("uniform", args).wait() != 0:
            raise SystemExit(f"the uniform run failed: {args.out / 'uniform.log'}")
        walls["uniform"] = time.monotonic() - start
        todo.remove("uniform")
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    while todo or running:
        while todo and len(running) < args.jobs:
            tag = todo.pop(0)
            running[tag] = (_launch(tag, args), time.monotonic())
        time.sleep(2)
        for tag, (proc, start) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    raise SystemExit(f"run {tag} failed: {args.out / (_folder_name(tag) + '.log')}")
                walls[tag] = time.monotonic() - start
                del running[tag]
    return walls


def joined_rows(tags: list[str], out: Path) -> list[dict[str, Any]]:
    """Every tag's rows relabelled ``run = tag``; the warm-start rows once (the uniform folder's)."""
    rows: list[dict[str, Any]] = []
    for tag in tags:
        for row in read_metrics(out / _folder_name(tag)):
            if row["run"] == "warm_start":
                if tag == "uniform":
                    rows.append(row)
                continue
            rows.append({**row, "run": tag})
    return rows


def composition_table(rows: list[dict[str, Any]], tags: list[str]) -> str:
    """Mean [95 % t-interval over seeds] of each `COMPOSITION` column over epoch >= 2, and the
    trained groups' pass-rate bins as shares."""
    head = (
        "| run | "
        + " | ".join(h for _, h in COMPOSITION)
        + " | trained groups at pass rate 0 / (0,.25) / [.25,.5) / [.5,.75) / [.75,1) / 1 |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for tag in tags:
        mine = [r for r in rows if r["run"] == tag and r.get("epoch", 1) >= 2 and "trained_groups" in r]
        if not mine:
            continue
        seeds = sorted({r["seed"] for r in mine})
        cells = []
        for key, _ in COMPOSITION:
            per_seed = [float(np.nanmean([r[key] for r in mine if r["seed"] == s])) for s in seeds]
            mean, half = t_interval(per_seed)
            cells.append(
                f"{mean:.2f}" if np.isnan(half) else f"{mean:.2f} [{mean - half:.2f}, {mean + half:.2f}]"
            )
        hist = np.sum([r["trained_pass_hist"] for r in mine], axis=0).astype(float)
        cells.append(" / ".join(f"{x:.0%}" for x in hist / hist.sum()))
        lines.append(f"| {tag} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(tags: list[str], out: Path) -> str:
    rows = joined_rows(tags, out)
    parts = []
    for reference in ("uniform", "coba"):
        if reference not in tags:
            continue
        summary = summarise(rows, reference=reference)
        tables = f"{format_table(summary, reference)}\n\n{format_compute(summary, reference)}"
        parts.append(f"### Against `{reference}`\n\n{tables}")
    parts.append(f"### What the update trains (epoch 2 on)\n\n{composition_table(rows, tags)}")
    parts.append(f"### Regime\n\n{format_regime(regime(rows))}")
    return "\n\n".join(parts)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out", type=Path, required=True, help="folder of the runs (reused: finished tags are kept)"
    )
    p.add_argument("--tags", default=",".join(TAGS), help=f"comma-separated, of {', '.join(TAGS)}")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--jobs", type=int, default=2, help="invocations at a time after the uniform one")
    p.add_argument("--publish", type=Path, default=None, help="write dapo_why.md into this folder")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    tags = args.tags.split(",")
    unknown = [t for t in tags if t not in TAGS]
    if unknown:
        p.error(f"unknown tags {unknown}; known: {', '.join(TAGS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    commit = _commit()  # the code the runs start from
    load_before = os.getloadavg()
    started = time.monotonic()
    walls = run_all(tags, args)
    wall = time.monotonic() - started
    load_after = os.getloadavg()
    text = report(tags, args.out)
    command = "python bench/dapo_why.py " + " ".join(sys.argv[1:] if argv is None else argv)
    footer = (
        f"{len(tags)} tags x seeds {args.seeds}, {args.jobs} at a time after uniform, in {wall / 60:.1f} min "
        f"(per tag: {', '.join(f'{t} {s / 60:.1f} min' for t, s in walls.items()) or 'all reused'}); "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    sys.stdout.write(f"{text}\n\n{footer}\n")
    if args.publish is not None:
        (args.publish / "dapo_why.md").write_text(
            "# Lab study `dapo_why`, scenario `dapo` (design: [dapo_why_design.md](dapo_why_design.md))\n\n"
            f"Command: `{command.strip()}` (commit {commit})\n\n{footer}\n\n{text}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
