"""A lab seed's training-prompt pass rates as a prior file, for `coba-verl plan`.

    python bench/lab_priors.py --scenario dapo --seed 0 --samples 16 --output runs/lab_priors_dapo_s0.jsonl
    coba-verl plan --prior-file runs/lab_priors_dapo_s0.jsonl --prompts 32 --n 16 --dapo --steps 60

The seed's warm start (cached as `coba-verl lab` caches it) samples every training prompt
``--samples`` times at temperature 1 (`coba_verl.lab.evaluation.measure_priors`, the ``+prior``
runs' measurement); the records are keyed by the prompt's training position, as the lab's tracker
ids are. This is what a user would measure before a run (`coba-verl estimate` in veRL); the plan
then predicts the step's generation from it, and the lab's runs measure it (docs/lab/dapo_changes.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from coba_verl.lab.config import LabConfig
from coba_verl.lab.evaluation import measure_priors
from coba_verl.lab.scenarios import SCENARIOS
from coba_verl.lab.seeds import new_model, prepare_seed
from coba_verl.records.priors import write_prior_file

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=list(SCENARIOS), default="dapo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--samples", type=int, default=16, help="samples per training prompt")
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "coba_verl" / "lab")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    cfg = LabConfig.from_scenario(args.scenario, seeds=[args.seed])
    ctx = prepare_seed(cfg, args.seed, cache_dir=args.cache_dir)
    model = new_model(cfg, ctx.tok, args.seed)
    model.load_state_dict(ctx.warm_state)
    model.to(cfg.device).eval()
    records = measure_priors(model, ctx, args.samples, cfg.coba_config("uniform").success_value)
    write_prior_file(args.output, records)
    logger.info("wrote %d records to %s", len(records.index), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
