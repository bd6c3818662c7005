"""Time the tiny CPU recipe through veRL's real trainer: setup, per step, coba-verl's share, memory.

    python -m coba_verl.arithmetic.tiny --output-dir ~/data/coba/tiny_cpu
    python bench/tiny_cpu.py                       # 48 steps of recipes/tiny_cpu, coba
    python bench/tiny_cpu.py --strategy uniform trainer.total_training_steps=12

Runs ``python -m coba_verl.main`` with the recipe's config (Ray, TaskRunner, FSDP2 worker, hf
rollout, agent loop and reward workers are all child processes), samples the resident memory of
the whole process tree twice a second, and reads veRL's own metrics from its file logger:

    setup        wall time until the first step starts (Ray, workers, model, servers)
    step         veRL's ``timing_s/step`` (median, min-max)
    plugin       ``coba/plugin_time_s``: allocate + session check and tracker update + end_step +
                 metrics, as a share of the same step's ``timing_s/step``; overall and per epoch
                 (veRL's ``training/epoch``), since epoch 1 without priors has nothing to allocate
                 (uniform budgets), and with its ``coba/alloc_time_s`` (the allocation alone) and
                 veRL's ``timing_s/adv`` (its advantage pass; on V1 with coba.group_weight=equal's
                 factor applied inside it)
    peak RSS     the largest sum over the process tree
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
from tiny_runs import logger_env, read_log, recipe_command


def tree_rss(root: psutil.Process) -> int:
    """Resident bytes of ``root`` and all its descendants (processes that vanish are skipped)."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default="~/data/coba/tiny_cpu", help="output of python -m coba_verl.arithmetic.tiny"
    )
    parser.add_argument("--strategy", default="coba")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args()
    data = Path(args.data_dir).expanduser()
    work = Path(tempfile.mkdtemp(prefix="tiny_cpu_bench_"))
    command = recipe_command(
        data, work, args.strategy, "trainer.test_freq=-1", "trainer.save_freq=-1", *args.overrides
    )
    env = logger_env(work)
    start = time.perf_counter()
    with open(work / "stdout.log", "w") as out:
        child = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        root = psutil.Process(child.pid)
        peak = 0
        while child.poll() is None:
            peak = max(peak, tree_rss(root))
            time.sleep(0.5)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        sys.exit(f"training failed (exit {child.returncode}); see {work / 'stdout.log'}")
    rows = [r for r in read_log(work) if "timing_s/step" in r]
    step = np.array([r["timing_s/step"] for r in rows])
    plugin = np.array([r.get("coba/plugin_time_s", np.nan) for r in rows])
    share = plugin / step
    print(f"command: {' '.join(command[1:])}")
    print(f"steps: {len(rows)}, wall {wall:.1f} s, setup {wall - step.sum():.1f} s (wall minus the steps)")
    print(f"step: median {np.median(step):.2f} s (min {step.min():.2f}, max {step.max():.2f})")
    print(
        f"plugin: median {np.nanmedian(plugin) * 1e3:.2f} ms a step, "
        f"{np.nanmedian(share) * 100:.2f} % of the step (max {np.nanmax(share) * 100:.2f} %)"
    )
    epochs = np.array([r.get("training/epoch", -1) for r in rows])
    alloc = np.array([r.get("coba/alloc_time_s", np.nan) for r in rows])
    adv = np.array([r.get("timing_s/adv", np.nan) for r in rows])  # veRL's advantage pass (V1)
    uniform = np.array([r.get("coba/budget_min", np.nan) == r.get("coba/budget_max", np.nan) for r in rows])
    for epoch in sorted(set(epochs.tolist())):
        sel = epochs == epoch
        ms, pct = plugin[sel] * 1e3, share[sel] * 100
        print(
            f"epoch {epoch + 1}: {sel.sum()} steps ({uniform[sel].sum()} with uniform budgets), plugin "
            f"median {np.nanmedian(ms):.2f} ms (min {np.nanmin(ms):.2f}, max {np.nanmax(ms):.2f}), "
            f"{np.nanmedian(pct):.2f} % of the step (max {np.nanmax(pct):.2f} %); the allocation alone "
            f"median {np.nanmedian(alloc[sel]) * 1e3:.2f} ms; veRL's advantage pass (timing_s/adv, with "
            f"coba.group_weight's factor on V1) median {np.nanmedian(adv[sel]) * 1e3:.2f} ms"
        )
    print(f"peak RSS of the process tree: {peak / 2**30:.2f} GiB; logs in {work}")


if __name__ == "__main__":
    main()
