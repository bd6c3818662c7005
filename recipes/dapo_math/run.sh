#!/usr/bin/env bash
# The paper's setting, DAPO-Math-17K with Qwen2.5-7B-Instruct, with CoBA-RL or a baseline
# (docs/recipes.md). Settings: recipes/dapo_math/config/*.yaml.
#
#   python -m coba_verl.data paper --output-dir ~/data/coba
#   bash recipes/dapo_math/run.sh                                   # CoBA-RL, 1 node x 8 GPUs
#   STRATEGY=uniform bash recipes/dapo_math/run.sh                  # GRPO with everything else equal
#   SETTING=qwen2.5_7b_instruct_half_budget bash recipes/dapo_math/run.sh
#   SETTING=qwen2.5_7b_instruct_dynamic_sampling bash recipes/dapo_math/run.sh   # DAPO dynamic sampling
#   TRAINER=classic bash recipes/dapo_math/run.sh                   # veRL's classic RayPPOTrainer
#   VAL_BENCHMARKS="aime2024 aime2025 amc23 math500_dapo olympiadbench minerva" bash recipes/dapo_math/run.sh
#
# Variables of recipes/launch.sh apply (STRATEGY, TRAINER, ROLLOUT, MODEL_PATH, NNODES, ...).
set -euo pipefail

RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SETTING=${SETTING:-qwen2.5_7b_instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/coba}
VAL_BENCHMARKS=${VAL_BENCHMARKS:-aime2024 aime2025 amc23 math500_dapo olympiadbench}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/dapo_math/train.parquet}
if [[ -z "${VAL_FILES:-}" ]]; then
  VAL_FILES=""
  for bench in $VAL_BENCHMARKS; do
    VAL_FILES+="${VAL_FILES:+,}'$DATA_DIR/$bench/test.parquet'"
  done
  VAL_FILES="[$VAL_FILES]"
fi

# shellcheck source=SCRIPTDIR/../launch.sh
source "$RECIPE_DIR/../launch.sh"
launch "$@"
