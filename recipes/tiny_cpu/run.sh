#!/usr/bin/env bash
# veRL's real trainer on CPU with a tiny model (docs/cpu_backend.md).
#
#   python -m coba_verl.arithmetic.tiny --output-dir ~/data/coba/tiny_cpu --priors 8
#   bash recipes/tiny_cpu/run.sh                          # CoBA-RL, 48 steps (the first 16 uniform)
#   STRATEGY=uniform bash recipes/tiny_cpu/run.sh         # GRPO with everything else equal
#   bash recipes/tiny_cpu/run.sh coba.prior_file=$HOME/data/coba/tiny_cpu/priors.jsonl trainer.total_training_steps=6
#                         # budgets from measured pass rates from step 1 (without, epoch 1 is B 4-4)
#
# Variables of recipes/launch.sh apply (STRATEGY, LOGGER, ...); ROLLOUT is hf (transformers).
set -euo pipefail

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SETTING=${SETTING:-tiny}
ROLLOUT=${ROLLOUT:-hf}
DATA_DIR=${DATA_DIR:-$HOME/data/coba}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/tiny_cpu/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/tiny_cpu/test.parquet}
MODEL_PATH=${MODEL_PATH:-$DATA_DIR/tiny_cpu/model}

# shellcheck source=SCRIPTDIR/../launch.sh
source "$RECIPE_DIR/../launch.sh"
launch "$@"
