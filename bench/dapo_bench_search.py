"""The search for a tiny-recipe DAPO bench where held-out accuracy moves, on uniform runs only.

    python -m coba_verl.arithmetic.tiny --output-dir DATA --easy --threads 2   # --test-size 128, 256
    python bench/dapo_bench_search.py --data-dir DATA --seeds 0 1 2 --steps 32 \\
        actor_rollout_ref.rollout.n=16 actor_rollout_ref.rollout.val_kwargs.n=4
    python bench/dapo_bench_search.py --logs RUN.jsonl ...      # veRL file-logger rows of earlier runs

The design (docs/dapo_n16_design.md, section 1) fixes the rule: a setting is a bench where accuracy
moves when uniform's held-out accuracy after the last step exceeds its accuracy before training by
more than three times the seed-to-seed standard error,

    d_s = acc_end(s) - acc_start(s)  per seed s,   mean(d) > 3 * SE,   SE = sd(d) / sqrt(#seeds),

with ``sd`` the sample standard deviation (ddof 1). Each seed runs ``python -m coba_verl.main`` on
the tiny recipe with DAPO's filter (``algorithm.filter_groups``), ``coba.strategy=uniform`` only,
validating before training and after the last step. Per seed the script prints the two
accuracies, their difference and the run's wall time (launch to exit); then mean(d), SE, their
ratio and whether the rule holds. Nothing but uniform is run or read.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tiny_runs import read_log, run_seeded

DAPO = ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward")
RULE_SE = 3.0


def accuracies(rows: list[dict]) -> list[tuple[int, float]]:
    """(row index, ``val-core/.../acc/mean@k``) of every validation in veRL's logged rows."""
    found = []
    for i, row in enumerate(rows):
        for key, value in row.items():
            if key.startswith("val-core/") and "/acc/mean@" in key:
                found.append((i, float(value)))
    return found


def start_end(rows: list[dict]) -> tuple[float, float]:
    """Held-out accuracy before training (the first validation) and after the last step (the last)."""
    vals = accuracies(rows)
    if len(vals) < 2 or vals[0][0] == vals[-1][0]:
        raise SystemExit("a run needs a validation before training and one after its last step")
    return vals[0][1], vals[-1][1]


def verdict(diffs: np.ndarray) -> tuple[float, float, float, bool]:
    """mean(d), SE = sd(d) / sqrt(len(d)), mean / SE and whether mean > 3 SE (the design's rule)."""
    mean = float(diffs.mean())
    se = float(diffs.std(ddof=1) / np.sqrt(len(diffs)))
    ratio = mean / se if se > 0 else float("inf") * np.sign(mean)
    return mean, se, ratio, bool(mean > RULE_SE * se)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default="~/data/coba/tiny_cpu", help="python -m coba_verl.arithmetic.tiny's output"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument(
        "--logs", nargs="+", type=Path, help="uniform runs' metrics.jsonl (or folders) to read instead"
    )
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (n, validation samples, lr, ...)")
    args = parser.parse_args()
    if args.logs and len(args.logs) < 2:
        parser.error("the standard error needs two runs or more")
    runs: list[tuple[str, list[dict], float]] = []
    if args.logs:
        runs = [(str(p), read_log(p), float("nan")) for p in args.logs]
    else:
        if len(args.seeds) < 2:
            parser.error("the standard error needs two seeds or more")
        data = Path(args.data_dir).expanduser()
        for seed in args.seeds:
            t0 = time.perf_counter()
            rows, work = run_seeded(
                data, "uniform", seed, args.steps, "dapo_search", *DAPO,
                "trainer.val_before_train=true", *args.overrides,
            )  # fmt: skip
            runs.append((f"seed {seed} ({work})", rows, time.perf_counter() - t0))
    diffs = []
    print(f"{'run':<60} {'start':>7} {'end':>7} {'end-start':>10} {'wall min':>9}")
    for name, rows, wall in runs:
        start, end = start_end(rows)
        diffs.append(end - start)
        print(f"{name:<60} {start:7.4f} {end:7.4f} {end - start:+10.4f} {wall / 60:9.1f}")
    mean, se, ratio, holds = verdict(np.asarray(diffs))
    print(f"mean(end-start) {mean:+.4f}  SE {se:.4f}  mean/SE {ratio:+.2f}  rule (> {RULE_SE:g} SE): "
          f"{'met' if holds else 'not met'}")  # fmt: skip


if __name__ == "__main__":
    main()
