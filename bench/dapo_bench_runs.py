"""Runs on the frozen DAPO bench (``recipes/tiny_cpu/config/dapo_bench.yaml``; design amendment 5).

    python -m coba_verl.arithmetic.tiny --output-dir DATA --easy --priors 8 --threads 2 --extra-test-size 256
    python bench/dapo_bench_runs.py --data-dir DATA --strategy coba --seeds 0 1 2          # C0
    python bench/dapo_bench_runs.py --data-dir DATA --strategy coba coba.size_refills=true --seeds 0 1 2
    python bench/dapo_tiny.py --logs U0 C0 U1 C1 U2 C2 --steps 48 actor_rollout_ref.rollout.n=16

Each seed runs exactly the command of the uniform-only search's setting 5
(`dapo_bench_search.py`: ``tiny_runs.run_seeded`` with DAPO's filter on the reward, validation before
training and after the last step, 48 steps, the bench's overrides of `BENCH`) with the strategy
given and, for a CoBA strategy, the data's priors (``coba.prior_file=DATA/priors.jsonl``); extra
Hydra overrides are appended (give them before ``--seeds``, which takes a list). The bench's test
set is ``DATA/test_256.parquet``. Prints each run's folder (its ``metrics.jsonl``) and wall time;
`dapo_tiny.py --logs` reads them beside uniform's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dapo_bench_search import DAPO
from tiny_runs import run_seeded

#: Setting 5 of the search (design amendments 2 and 4), as recipes/tiny_cpu/config/dapo_bench.yaml holds it.
BENCH = (
    "actor_rollout_ref.rollout.n=16", "coba.max_rollouts=64", "actor_rollout_ref.rollout.val_kwargs.n=2",
    "coba_cpu.poll_interval_s=0.05",
)  # fmt: skip
STEPS = 48
TEST_SET = "test_256.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", default="~/data/coba/tiny_cpu_easy", help="the easy data, with test_256.parquet"
    )
    parser.add_argument("--strategy", required=True, help="coba.strategy: uniform, coba, knapsack, ...")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (coba.size_refills=true, ...)")
    args = parser.parse_args()
    data = Path(args.data_dir).expanduser()
    test = data / TEST_SET
    if not test.is_file():
        parser.error(f"{test} is missing: python -m coba_verl.arithmetic.tiny ... --extra-test-size 256")
    priors = [] if args.strategy == "uniform" else [f"coba.prior_file={data / 'priors.jsonl'}"]
    for seed in args.seeds:
        start = time.perf_counter()
        _, work = run_seeded(
            data, args.strategy, seed, STEPS, "dapo_bench", *DAPO, "trainer.val_before_train=true", *BENCH,
            f"data.val_files={test}", *priors, *args.overrides,
        )  # fmt: skip
        print(f"seed {seed} {args.strategy} {' '.join(args.overrides)}: {work} "
              f"({(time.perf_counter() - start) / 60:.1f} min)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
