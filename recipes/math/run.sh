#!/usr/bin/env bash
# MATH with CoBA-RL or a baseline (docs/recipes.md). Settings: recipes/math/config/*.yaml.
#
#   python -m coba_verl.data math --output-dir ~/data/coba/math
#   python -m coba_verl.data math500 --output-dir ~/data/coba/math500
#   bash recipes/math/run.sh                                    # Qwen2.5-1.5B-Instruct, 8 GPUs, CoBA-RL
#   STRATEGY=knapsack bash recipes/math/run.sh                  # Knapsack-RL with everything else equal
#   SETTING=qwen2.5_7b_instruct ROLLOUT=sglang bash recipes/math/run.sh
#
# Variables of recipes/launch.sh apply (STRATEGY, ROLLOUT, MODEL_PATH, NNODES, ...).
set -euo pipefail

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SETTING=${SETTING:-qwen2.5_1.5b_instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/coba}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/math/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/math500/test.parquet}

# shellcheck source=SCRIPTDIR/../launch.sh
source "$RECIPE_DIR/../launch.sh"
launch "$@"
