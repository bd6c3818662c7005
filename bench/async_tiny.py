"""Uniform GRPO against CoBA-RL in veRL's async trainers, side by side, on the tiny recipe.

    python -m coba_verl.arithmetic.tiny --output-dir ~/data/coba/tiny_cpu
    python bench/async_tiny.py                                  # colocate_async, seeds 0 1, 16 steps each
    python bench/async_tiny.py --seeds 0 1 2 --steps 32 trainer.v1.colocate_async.num_warmup_batches=2
    python bench/async_tiny.py --mode separate_async            # a standalone hf server, 2 updates a sync
    python bench/async_tiny.py --fail-rate 0.05 --decode-pace 0.05   # failures injected, long answers

Each seed runs ``python -m coba_verl.main trainer.v1.trainer_mode=<mode>`` twice, uniform then
CoBA, one after the other on the same data, model and seed (``data.seed`` and the rollout seed), and
reads veRL's own metrics from its file logger. Per strategy, over all steps of all seeds:

    trained/update   ``coba/trained_rollouts`` per update (must be M x n for both)
    tok gen/step     ``coba/tokens_generated``: response tokens scored into the tracker per step
    tok train/step   ``coba/tokens_trained``
    update s         ``timing_s/update_actor``, median over steps
    wait s           ``timing_s/gen``: the update waiting for sampleable groups, median
    step s           ``timing_s/step``, median
    stale share      groups veRL evicted as stale / groups trained
    behind           ``coba/versions_behind_mean``, mean over steps (updates between a trained
                     session's submission and its update)
    behind max       ``coba/versions_behind_max``, max over steps: the oldest group any update trained
    failed/step      ``coba/failed_rollouts`` per step: sessions that never finished
    evicted B        ``coba/evicted_budget_mean``, mean over the steps that evicted a group, beside
    budget mean      ``coba/budget_mean``, mean over steps: are the big groups the ones evicted?
    spans max        ``training/off_policy/trajectory_spans/max``, max over steps: answers that
                     crossed a weight update (partial rollout)
    held-out         ``val-core/.../acc/mean@k`` after the last step, mean over seeds

then CoBA / uniform ratios.

``--fail-rate p`` sets ``COBA_HF_FAIL_RATE=p`` for both runs (each request of the ``hf`` server fails
with probability p, drawn from its seed, so both strategies see the same rule); ``--decode-pace s``
sets ``COBA_HF_DECODE_PACE_S=s`` (each decoded token takes at least s seconds, so answers are still
being written when an update aborts generation).

The runs share the machine with nothing but themselves (one at a time), and a step's time
includes the 2 cores' generation running beside the update.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from tiny_runs import mean_held_out, print_side_by_side, run_seeded

from coba_verl.cpu.hf_env import DECODE_PACE_ENV, FAIL_RATE_ENV

STRATEGIES = ("uniform", "coba")
#: veRL's metric of how many weight versions the longest trained answer was written under
SPANS_MAX = "training/off_policy/trajectory_spans/max"
#: what each mode needs on the tiny recipe (M = 16 = parameter_sync_step x ppo_mini_batch_size 8)
MODE_OVERRIDES = {
    "colocate_async": [],
    "separate_async": [
        "trainer.v1.separate_async.parameter_sync_step=2",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
    ],
}


def run(data: Path, strategy: str, seed: int, steps: int, mode: str, overrides: list[str]) -> list[dict]:
    """One run of the tiny recipe in ``mode``; veRL's per-step metrics (with the final validation)."""
    rows, _ = run_seeded(
        data,
        strategy,
        seed,
        steps,
        mode,
        f"trainer.v1.trainer_mode={mode}",
        *MODE_OVERRIDES[mode],
        *overrides,
    )
    return rows


def _mean_logged(steps: list[dict], key: str) -> float:
    """Mean of ``key`` over the steps that logged it (nan if none did)."""
    values = [row[key] for row in steps if key in row]
    return float(np.mean(values)) if values else float("nan")


def summary(rows_by_seed: list[list[dict]]) -> dict[str, float]:
    """The module docstring's figures for one strategy."""
    steps = [row for rows in rows_by_seed for row in rows if "timing_s/step" in row]
    stale = sum(v for row in steps for k, v in row.items() if k.endswith("/off_policy/evicted_samples"))
    trained_groups = sum(row["coba/trained_groups"] for row in steps)
    return {
        "trained/update": float(np.mean([row["coba/trained_rollouts"] for row in steps])),
        "trained min-max": (
            min(r["coba/trained_rollouts"] for r in steps),
            max(r["coba/trained_rollouts"] for r in steps),
        ),
        "tok gen/step": float(np.mean([row["coba/tokens_generated"] for row in steps])),
        "tok train/step": float(np.mean([row["coba/tokens_trained"] for row in steps])),
        "update s": float(np.median([row["timing_s/update_actor"] for row in steps])),
        "wait s": float(np.median([row["timing_s/gen"] for row in steps])),
        "step s": float(np.median([row["timing_s/step"] for row in steps])),
        "stale share": stale / max(trained_groups, 1),
        "behind": float(np.mean([row["coba/versions_behind_mean"] for row in steps])),
        "behind max": float(max(row["coba/versions_behind_max"] for row in steps)),
        "failed/step": float(np.mean([row.get("coba/failed_rollouts", 0) for row in steps])),
        "evicted B": _mean_logged(steps, "coba/evicted_budget_mean"),
        "budget mean": _mean_logged(steps, "coba/budget_mean"),
        "spans max": float(max(row.get(SPANS_MAX, float("nan")) for row in steps)),
        "held-out": mean_held_out(rows_by_seed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default="~/data/coba/tiny_cpu", help="output of python -m coba_verl.arithmetic.tiny"
    )
    parser.add_argument("--mode", choices=sorted(MODE_OVERRIDES), default="colocate_async")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--fail-rate", type=float, default=0.0, help="COBA_HF_FAIL_RATE for both runs")
    parser.add_argument("--decode-pace", type=float, default=0.0, help="COBA_HF_DECODE_PACE_S (s/token)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, for both strategies")
    args = parser.parse_args()
    data = Path(args.data_dir).expanduser()
    os.environ[FAIL_RATE_ENV] = str(args.fail_rate)  # read by the hf servers the runs start
    os.environ[DECODE_PACE_ENV] = str(args.decode_pace)
    results = {strategy: [] for strategy in STRATEGIES}
    for seed in args.seeds:
        for strategy in STRATEGIES:
            results[strategy].append(run(data, strategy, seed, args.steps, args.mode, args.overrides))
    table = {strategy: summary(rows) for strategy, rows in results.items()}
    print(
        f"{args.mode}, tiny recipe, seeds {args.seeds}, {args.steps} steps, fail rate {args.fail_rate}, "
        f"decode pace {args.decode_pace} s, overrides {args.overrides}"
    )
    print_side_by_side(table, 16)


if __name__ == "__main__":
    main()
