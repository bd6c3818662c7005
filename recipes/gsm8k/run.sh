#!/usr/bin/env bash
# GSM8K with CoBA-RL or a baseline (docs/recipes.md). Settings: recipes/gsm8k/config/*.yaml.
#
#   python -m coba_verl.data gsm8k --output-dir ~/data/coba/gsm8k
#   bash recipes/gsm8k/run.sh                                   # Qwen2.5-1.5B-Instruct, 8 GPUs, CoBA-RL
#   STRATEGY=uniform bash recipes/gsm8k/run.sh                  # GRPO with everything else equal
#   SETTING=qwen2.5_0.5b_instruct_1gpu bash recipes/gsm8k/run.sh
#   ROLLOUT=sglang bash recipes/gsm8k/run.sh trainer.total_epochs=1
#
# Variables of recipes/launch.sh apply (STRATEGY, ROLLOUT, MODEL_PATH, NNODES, ...).
set -euo pipefail

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SETTING=${SETTING:-qwen2.5_1.5b_instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/coba}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/gsm8k/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/gsm8k/test.parquet}

# shellcheck source=SCRIPTDIR/../launch.sh
source "$RECIPE_DIR/../launch.sh"
launch "$@"
