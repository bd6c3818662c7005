"""Runs on the frozen DAPO bench (``recipes/tiny_cpu/config/dapo_bench.yaml``; design amendment 5).

    python -m coba_verl.arithmetic.tiny --output-dir DATA --easy --priors 8 --threads 2 --extra-test-size 256
    python bench/dapo_bench_runs.py --data-dir DATA --strategy coba coba.size_refills=false --seeds 0 1 2 # C0
    python bench/dapo_bench_runs.py --data-dir DATA --strategy coba --seeds 0 1 2  # C-size (default)
    python bench/dapo_tiny.py --logs U0 C0 U1 C1 U2 C2 --steps 48 actor_rollout_ref.rollout.n=16

Each seed launches the bench's own config (``--config-name dapo_bench``, the one file that holds the
bench: DAPO's filter, n, B_up, the validation, the poll, its steps) through ``tiny_runs.run_seeded``
with validation before training, the strategy given and, for a CoBA strategy, the data's priors
(``coba.prior_file=DATA/priors.jsonl``); extra Hydra overrides are appended (give them before
``--seeds``, which takes a list; ``actor_rollout_ref.rollout.n=8 coba.max_rollouts=32`` runs the
bench at another n). The bench's test set is ``DATA/test_256.parquet``. Prints each run's folder
(its ``metrics.jsonl``) and wall time; `dapo_tiny.py --logs` reads them beside uniform's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from omegaconf import OmegaConf
from tiny_runs import REPO, run_seeded

#: The frozen bench (setting 5 of the search, design amendments 2 and 4).
CONFIG_NAME = "dapo_bench"
STEPS = OmegaConf.load(REPO / f"recipes/tiny_cpu/config/{CONFIG_NAME}.yaml").trainer.total_training_steps
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
            data, args.strategy, seed, STEPS, CONFIG_NAME, "trainer.val_before_train=true",
            f"data.val_files={test}", *priors, *args.overrides, config_name=CONFIG_NAME,
        )  # fmt: skip
        print(f"seed {seed} {args.strategy} {' '.join(args.overrides)}: {work} "
              f"({(time.perf_counter() - start) / 60:.1f} min)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
