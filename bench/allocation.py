"""Allocation speed: DP vs heap (paper Algorithm 1) vs threshold solver, measured side by side.

    python bench/allocation.py            # full table (about a minute on 2 cores)
    python bench/allocation.py --quick    # smaller repeats, no DP beyond M = 512

Part 1 is the paper's Table-4 setting (M = 512, B_total = 8192, [2, 128]); part 2 scales M at
16 rollouts per prompt. Every row checks that the solvers reach the same objective. Times are
the best of several repeats (the DP runs once); ratios are computed from the same run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from coba_verl.core import BudgetAllocator, CobaConfig
from coba_verl.core.gains import GainModel
from coba_verl.core.solvers import objective, solve_dp, solve_heap, solve_threshold
from coba_verl.core.values import CobaValue

LOW, UP = 2, 128


def pass_rates(m: int, rng: np.random.Generator) -> np.ndarray:
    """A training-like batch: k/16 pass rates, about a third solved or unsolved, the rest spread."""
    k = np.where(rng.random(m) < 0.35, rng.choice([0, 16], size=m), rng.integers(1, 16, size=m))
    return k / 16.0


def best_time(fn: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def row(gains: GainModel, total: int, repeats: int, with_dp: bool) -> dict[str, float]:
    t_heap, b_heap = best_time(lambda: solve_heap(gains, total, LOW, UP), repeats)
    t_fast, b_fast = best_time(lambda: solve_threshold(gains, total, LOW, UP), repeats * 5)
    res = {"heap": t_heap, "fast": t_fast, "same": float(np.array_equal(b_heap, b_fast))}
    ref = objective(gains, b_heap)
    res["agree"] = float(np.isclose(objective(gains, b_fast), ref, rtol=1e-12))
    if with_dp:
        t_dp, b_dp = best_time(lambda: solve_dp(gains, total, LOW, UP), 1)
        res["dp"] = t_dp
        res["agree"] *= float(np.isclose(objective(gains, b_dp), ref, rtol=1e-12))
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats; DP only at M <= 512")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    repeats = 3 if args.quick else 7
    dp_max = 512 if args.quick else 1024

    value = CobaValue(7.26, 3.74)  # F_tilde = 0.696 at kappa = 11; adaptive tau
    batches = 3 if args.quick else 5
    rows = [row(value.gains(pass_rates(512, rng)), 8192, repeats, with_dp=True) for _ in range(batches)]
    print(f"Table-4 setting: M = 512, B_total = 8192, [2, 128]; {batches} random batches, median (min-max)")
    print(f"{'solver':<10}{'time':>22}{'fast is x faster':>26}")
    for name in ("dp", "heap", "fast"):
        t = np.array([r[name] for r in rows])
        x = np.array([r[name] / r["fast"] for r in rows])
        print(
            f"{name:<10}{np.median(t) * 1e3:>10.3f}ms ({t.min() * 1e3:.3g}-{t.max() * 1e3:.3g})"
            f"{np.median(x):>12.0f}x ({x.min():.0f}-{x.max():.0f})"
        )
    agree = all(r["agree"] for r in rows)
    same = all(r["same"] for r in rows)
    print(f"same objective (dp, heap, fast) on every batch: {agree}; heap == fast budgets: {same}\n")

    print(f"Scaling at 16 rollouts per prompt, [2, 128] (DP only up to M = {dp_max}; '-' = not run)")
    print(
        f"{'M':>6}{'B_total':>9}{'dp':>12}{'heap':>12}{'fast':>11}{'heap/fast':>11}"
        f"{'dp/fast':>10}{'alloc()':>10}{'agree':>7}"
    )
    for m in (256, 512, 1024, 2048, 4096, 8192):
        total = 16 * m
        p = pass_rates(m, rng)
        gains = value.gains(p)
        r = row(gains, total, repeats, with_dp=m <= dp_max)
        alloc = BudgetAllocator(CobaConfig(), num_prompts=m)
        alloc.record(np.arange(m), np.round(p * 16).astype(int), np.full(m, 16))
        alloc.end_step()
        t_alloc, _ = best_time(lambda: alloc.allocate(np.arange(m), total).budgets, repeats)  # noqa: B023
        dp = f"{r['dp']:.3f}s" if "dp" in r else "-"
        dp_ratio = f"{r['dp'] / r['fast']:.0f}x" if "dp" in r else "-"
        print(
            f"{m:>6}{total:>9}{dp:>12}{r['heap'] * 1e3:>10.2f}ms{r['fast'] * 1e3:>9.3f}ms"
            f"{r['heap'] / r['fast']:>10.0f}x{dp_ratio:>10}{t_alloc * 1e3:>8.2f}ms{bool(r['agree']):>7}"
        )
    print("\nalloc(): BudgetAllocator.allocate end to end (tracker lookup, Beta pdf, tau, fast solver).")


if __name__ == "__main__":
    main()
