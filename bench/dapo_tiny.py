"""Uniform GRPO against CoBA-RL under DAPO dynamic sampling in veRL's V1 sync trainer, on the tiny recipe.

    python -m coba_verl.arithmetic.tiny --output-dir ~/data/coba/tiny_cpu
    python bench/dapo_tiny.py                                   # seeds 0 1, 32 steps each
    nice -n 5 python bench/dapo_tiny.py --seeds 0 1 2 --steps 40      # docs/verl.md, "What a step costs"
    python bench/dapo_tiny.py --seeds 0 1 2 --steps 40 --val-every 4  # also the compute to target

Each seed runs ``python -m coba_verl.main`` with ``algorithm.filter_groups.enable=true
algorithm.filter_groups.metric=reward`` twice, uniform then CoBA, one after the other on the same
data, model and seed (``data.seed`` and the rollout seed), validates once after the last step, and
reads veRL's own metrics from its file logger. Per strategy, over all steps of all seeds:

    trained/step       ``coba/trained_rollouts`` per step, mean and min-max (must be M x n for both)
    gen/trained        rollouts generated per trained rollout: sum ``coba/rollouts_generated`` /
                       sum ``coba/trained_rollouts`` (1 without DAPO)
    tok gen/trained    response tokens generated per trained rollout (``coba/tokens_generated``:
                       every session observed, trained, cut or evicted)
    tok gen/tok train  ``coba/tokens_generated`` / ``coba/tokens_trained``
    rounds/step        ``coba/rounds``: rounds of M prompts drawn from the loader and allocated in
                       the step (veRL's V1 logs no ``num_gen_batches``; its refills of k prompts take
                       what is left of the current round, so this is DAPO's generation rounds)
    evicted/step       ``training/filter_groups/evicted_samples``: groups veRL's filter evicted
                       (no reward spread), mean per step
    surplus/step       ``training/filter_groups/discarded_surplus_samples``, mean per step
    evicted rollouts   ``coba/evicted_rollouts`` per step (the filter's and the surplus's sessions)
    zero-var share     ``coba/all_pass_share + coba/all_fail_share``: share of the step's observed
                       groups without a reward spread, mean over steps
    cut/step           ``coba/cut_rollouts``: sessions cut from a trained group to make M x n
    evicted B          ``coba/evicted_budget_mean``: mean budget of the groups cleared untrained,
                       mean over the steps that cleared some (n for uniform)
    step s             ``timing_s/step``, median over steps (validation is outside it)
    gen s, update s    ``timing_s/gen`` (waiting for M x n rollouts, refills included) and
                       ``timing_s/update_actor``, medians over steps
    held-out           ``val-core/.../acc/mean@k`` after the last step, mean over seeds

then CoBA / uniform ratios of these pooled figures, and per seed the ratios of rollouts and tokens
generated per trained rollout and of the median step, with their mean and a 95 % t-interval over
seeds, and the held-out accuracies. With ``--val-every K`` (``trainer.test_freq=K``) each run
also validates before training and every K steps; the compute to target is reported per seed: the rollouts and
tokens generated (summed ``coba/rollouts_generated``, ``coba/tokens_generated``) up to the first
validation whose held-out accuracy reaches the same seed's uniform final
(``coba_verl.lab.report.compute_to_target``), with the count of seeds that reach it and the
CoBA / uniform ratio over seeds where both do; so is Δ AUC per generated rollout (token), the mean
held-out accuracy over a common range of generated compute, from the validation before training,
and the held-out gain per 10,000 generated rollouts, (after the last step - before training) /
rollouts generated.
``--logs`` reads the folders of earlier runs instead of
running (seed by seed, uniform then CoBA, as the script prints them). ``coba/trained_rollouts``
differing from M x n in any step is reported as a defect and the script exits with status 1
after printing the tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy import stats
from tiny_runs import held_out, mean_held_out, print_side_by_side, read_log, run_seeded

from coba_verl.lab.report import auc_until, compute_to_target

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/tiny_cpu/config/_tiny.yaml"
STRATEGIES = ("uniform", "coba")
DAPO = ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward")
EVICTED = "training/filter_groups/evicted_samples"
SURPLUS = "training/filter_groups/discarded_surplus_samples"


def batch_rollouts(overrides: list[str]) -> int:
    """M x n: ``data.train_batch_size`` x ``actor_rollout_ref.rollout.n``, the recipe's unless overridden."""
    recipe = yaml.safe_load(RECIPE.read_text())
    values = {
        "data.train_batch_size": recipe["data"]["train_batch_size"],
        "actor_rollout_ref.rollout.n": recipe["actor_rollout_ref"]["rollout"]["n"],
    }
    for override in overrides:
        key, _, value = override.partition("=")
        if key in values:
            values[key] = int(value)
    return int(values["data.train_batch_size"]) * int(values["actor_rollout_ref.rollout.n"])


def run(data: Path, strategy: str, seed: int, steps: int, overrides: list[str]) -> tuple[list[dict], Path]:
    """One DAPO run of the tiny recipe; veRL's per-step metrics (the last with the final validation)."""
    return run_seeded(data, strategy, seed, steps, "dapo", *DAPO, "trainer.total_epochs=1000", *overrides)


def training_steps(rows: list[dict]) -> list[dict]:
    """The rows of training steps (each has ``timing_s/step``)."""
    return [row for row in rows if "timing_s/step" in row]


def per_trained(steps: list[dict], key: str) -> float:
    """Sum of ``key`` over the steps per trained rollout."""
    return sum(row[key] for row in steps) / sum(row["coba/trained_rollouts"] for row in steps)


def summary(rows_by_seed: list[list[dict]]) -> dict[str, float | tuple]:
    """The module docstring's pooled figures for one strategy."""
    steps = [row for rows in rows_by_seed for row in training_steps(rows)]
    trained = [row["coba/trained_rollouts"] for row in steps]
    return {
        "trained/step": float(np.mean(trained)),
        "trained min-max": (int(min(trained)), int(max(trained))),
        "gen/trained": per_trained(steps, "coba/rollouts_generated"),
        "tok gen/trained": per_trained(steps, "coba/tokens_generated"),
        "tok gen/tok train": sum(r["coba/tokens_generated"] for r in steps)
        / sum(r["coba/tokens_trained"] for r in steps),
        "rounds/step": float(np.mean([row["coba/rounds"] for row in steps])),
        "evicted/step": float(np.mean([row.get(EVICTED, 0) for row in steps])),
        "surplus/step": float(np.mean([row.get(SURPLUS, 0) for row in steps])),
        "evicted rollouts": float(np.mean([row["coba/evicted_rollouts"] for row in steps])),
        "zero-var share": float(
            np.mean([row.get("coba/all_pass_share", 0) + row.get("coba/all_fail_share", 0) for row in steps])
        ),
        "cut/step": float(np.mean([row.get("coba/cut_rollouts", 0) for row in steps])),
        "evicted B": float(
            np.mean([r["coba/evicted_budget_mean"] for r in steps if "coba/evicted_budget_mean" in r])
        ),
        "step s": float(np.median([row["timing_s/step"] for row in steps])),
        "gen s": float(np.median([row["timing_s/gen"] for row in steps])),
        "update s": float(np.median([row["timing_s/update_actor"] for row in steps])),
        "held-out": mean_held_out(rows_by_seed),
    }


def validation_curve(rows: list[dict], key: str) -> list[tuple[float, float]]:
    """(``key`` summed over the training steps up to and including a validated step, its held-out
    accuracy) for every validated step, in order, from (0, the validation before training) when the
    run has one: the accuracy-against-compute curve of one run."""
    curve, total = [], 0.0
    for row in rows:
        accuracy = held_out([row])
        if "timing_s/step" not in row:  # the validation before training (step 0), if any
            if not np.isnan(accuracy) and not curve:
                curve.append((0.0, float(accuracy)))
            continue
        total += row[key]
        if not np.isnan(accuracy):
            curve.append((total, float(accuracy)))
    return curve


def compute_to_target_table(results: dict[str, list[list[dict]]], seeds: list[int]) -> None:
    """Per seed, the rollouts and tokens each strategy generated until its held-out accuracy first
    reached the seed's uniform final; the seeds that reach it; CoBA / uniform over seeds where both
    do; and Δ AUC per generated rollout (token): CoBA's mean held-out accuracy over the first X
    generated rollouts (tokens) minus uniform's, X the smaller of the two runs' totals, from the
    validation before training (``coba_verl.lab.report.auc_until``)."""
    print("\ncompute to target (target: the seed's uniform final held-out accuracy)")
    for key, unit in (("coba/rollouts_generated", "rollouts"), ("coba/tokens_generated", "tokens")):
        reached = {strategy: 0 for strategy in STRATEGIES}
        ratios, d_auc = [], []
        for i, seed in enumerate(seeds):
            target = held_out(results["uniform"][i])
            curves = {s: validation_curve(results[s][i], key) for s in STRATEGIES}
            found = {s: compute_to_target(curves[s], target) for s in STRATEGIES}
            for strategy, value in found.items():
                reached[strategy] += not np.isnan(value)
            if not np.isnan(found["coba"]) and not np.isnan(found["uniform"]) and found["uniform"] > 0:
                ratios.append(found["coba"] / found["uniform"])
            end = min(curves["coba"][-1][0], curves["uniform"][-1][0]) if all(curves.values()) else 0.0
            d_auc.append(auc_until(curves["coba"], end) - auc_until(curves["uniform"], end))
            parts = ", ".join(
                f"{s} {found[s]:,.0f}" if not np.isnan(found[s]) else f"{s} not reached" for s in STRATEGIES
            )
            print(f"seed {seed}: target {target:.3f}; {unit} to target {parts}; d AUC {d_auc[-1]:+.4f}")
        counts = ", ".join(f"{s} {reached[s]}/{len(seeds)}" for s in STRATEGIES)
        ratio = interval(ratios) if ratios else "n/a"
        print(f"{unit}: seeds reaching the target {counts}; coba/uniform where both reach it: {ratio}")
        finite = [d for d in d_auc if not np.isnan(d)]
        auc = interval(finite) if finite else "n/a (no validation before training)"
        print(f"d AUC per generated {unit[:-1]}, coba - uniform over seeds: {auc}")
    gain_per_generated(results, seeds)


def gain_per_generated(results: dict[str, list[list[dict]]], seeds: list[int]) -> None:
    """Per seed and strategy, the held-out gain per 10,000 generated rollouts: (accuracy after the
    last step - accuracy before training) / rollouts generated x 10,000 (design amendment 5's measure
    2), and CoBA minus uniform over seeds; nothing for runs without a validation before training."""
    gains: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for i, seed in enumerate(seeds):
        for strategy in STRATEGIES:
            gain = gain_per_10k(validation_curve(results[strategy][i], "coba/rollouts_generated"))
            if gain is None:
                return
            gains[strategy].append(gain)
        print(f"seed {seed}: held-out gain per 10,000 generated rollouts "
              + ", ".join(f"{s} {gains[s][-1]:+.4f}" for s in STRATEGIES))  # fmt: skip
    diffs = [c - u for u, c in zip(gains["uniform"], gains["coba"], strict=True)]
    print(f"held-out gain per 10,000 generated rollouts, coba - uniform over seeds: {interval(diffs)}")


def gain_per_10k(curve: list[tuple[float, float]]) -> float | None:
    """(held-out after the last step - before training) / rollouts generated x 10,000, from a run's
    `validation_curve` over ``coba/rollouts_generated`` (design amendment 5's measure 2); None for a
    run without a validation before training and one after."""
    if len(curve) < 2 or curve[0][0] != 0.0:
        return None
    return (curve[-1][1] - curve[0][1]) / curve[-1][0] * 1e4


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % t-interval over seeds (the mean three times for one seed)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / np.sqrt(len(values)))
    return mean, mean - half, mean + half


def interval(values: list[float], sign: str = "") -> str:
    """`t_interval` as ``mean [low, high]``, three decimals (the mean alone for one seed);
    ``sign="+"`` for differences."""
    mean, low, high = t_interval(values)
    form = f"{sign}.3f"
    return f"{mean:{form}} [{low:{form}}, {high:{form}}]" if len(values) > 1 else f"{mean:{form}}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default="~/data/coba/tiny_cpu", help="output of python -m coba_verl.arithmetic.tiny"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument(
        "--val-every",
        type=int,
        default=0,
        metavar="K",
        help="also validate every K steps (trainer.test_freq) and report the compute to target",
    )
    parser.add_argument(
        "--logs", nargs="+", type=Path, help="folders of earlier runs to read instead of running"
    )
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, for both strategies")
    args = parser.parse_args()
    data = Path(args.data_dir).expanduser()
    if args.val_every < 0:
        parser.error(f"--val-every must be 0 (validate after the last step only) or more: {args.val_every}")
    if args.val_every:
        validate = [f"trainer.test_freq={args.val_every}", "trainer.val_before_train=true"]
        args.overrides = [*args.overrides, *validate]
    target = batch_rollouts(args.overrides)
    if args.logs is not None and len(args.logs) != len(STRATEGIES) * len(args.seeds):
        parser.error(f"--logs needs {len(STRATEGIES)} folders per seed, got {len(args.logs)}")
    folders = iter(args.logs or [])
    results: dict[str, list[list[dict]]] = {strategy: [] for strategy in STRATEGIES}
    for seed in args.seeds:
        for strategy in STRATEGIES:
            if args.logs is None:
                rows, work = run(data, strategy, seed, args.steps, args.overrides)
            else:
                work = next(folders)
                rows = read_log(work)
            print(f"seed {seed} {strategy}: {len(training_steps(rows))} steps, logs in {work}", flush=True)
            results[strategy].append(rows)

    table = {strategy: summary(rows) for strategy, rows in results.items()}
    print(
        f"\nV1 sync + DAPO (filter_groups.metric=reward), tiny recipe, M x n = {target}, "
        f"seeds {args.seeds}, {args.steps} steps, overrides {args.overrides}"
    )
    print_side_by_side(table, 18)

    print("\nper seed (coba / uniform; held-out uniform, coba)")
    seeds = {s: [summary([rows]) for rows in results[s]] for s in STRATEGIES}
    ratios: dict[str, list[float]] = {key: [] for key in ("gen/trained", "tok gen/trained", "step s")}
    for i, seed in enumerate(args.seeds):
        u, c = seeds["uniform"][i], seeds["coba"][i]
        for key in ratios:
            ratios[key].append(c[key] / u[key])
        parts = ", ".join(f"{key} {ratios[key][-1]:.3f}" for key in ratios)
        print(f"seed {seed}: {parts}; held-out {u['held-out']:.3f}, {c['held-out']:.3f}")
    for key, values in ratios.items():
        print(f"{key} ratio over seeds: {interval(values)}")
    delta = [c["held-out"] - u["held-out"] for u, c in zip(seeds["uniform"], seeds["coba"], strict=True)]
    print(f"held-out coba - uniform over seeds: {interval(delta)}")
    if args.val_every or args.logs is not None:
        compute_to_target_table(results, args.seeds)

    wrong = [
        (strategy, seed, row.get("training/global_step", n + 1), row["coba/trained_rollouts"])
        for strategy in STRATEGIES
        for seed, rows in zip(args.seeds, results[strategy], strict=True)
        for n, row in enumerate(training_steps(rows))
        if row["coba/trained_rollouts"] != target
    ]
    if wrong:
        print(
            f"\nDEFECT: steps that did not train M x n = {target} rollouts (strategy, seed, step, trained):"
        )
        for item in wrong:
            print(f"  {item}")
        sys.exit(1)


if __name__ == "__main__":
    main()
