# shellcheck shell=bash
# The launcher every recipes/<task>/run.sh sources. The caller sets RECIPE_DIR, SETTING,
# TRAIN_FILES and VAL_FILES, then calls `launch "$@"`. Everything else comes from the
# environment, so CoBA-RL and a baseline differ by one variable (STRATEGY) and nothing else:
#
#   STRATEGY         coba | coba_release | knapsack | uniform (GRPO) | static | reverse   [coba]
#   ROLLOUT          vllm | sglang                                                         [vllm]
#   TRAINER          v1 (veRL's V1 sync trainer) | classic (RayPPOTrainer, trainer.use_v1=false)  [v1]
#   MODEL_PATH       model folder or hub id                            [the setting's hub id]
#   NNODES           nodes of the Ray cluster                             [the setting's, 1]
#   N_GPUS_PER_NODE  GPUs per node                                                [setting's]
#   LOGGER           trainer.logger, e.g. '["console","wandb"]'                  [["console"]]
#   PROJECT          trainer.project_name                                         [coba-verl]
#   EXPERIMENT       trainer.experiment_name              [<task>-<setting>-<strategy>-<rollout>]
#   PYTHON           the interpreter                                                [python3]
#   ESTIMATE=FILE    instead of training, measure every training prompt's pass rate with the same
#                    config (coba-verl estimate) and write them to FILE; train with
#                    coba.prior_file=FILE afterwards
#   SAMPLES          generations per prompt for ESTIMATE                                      [8]
#   DRY_RUN=1        print the command, one argument per line, instead of running it
#   HYDRA_FULL_ERROR=1  full tracebacks through Hydra for errors that are not coba-verl's refusals
#
# Arguments after the script name are appended as Hydra overrides (they win).

STRATEGY=${STRATEGY:-coba}
ROLLOUT=${ROLLOUT:-vllm}
MODEL_PATH=${MODEL_PATH:-}
NNODES=${NNODES:-}
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-}
LOGGER=${LOGGER:-'["console"]'}
PROJECT=${PROJECT:-coba-verl}
PYTHON=${PYTHON:-python3}
DRY_RUN=${DRY_RUN:-0}
TRAINER=${TRAINER:-v1}
ESTIMATE=${ESTIMATE:-}
SAMPLES=${SAMPLES:-8}

launch() {
  local task experiment
  task=$(basename "$RECIPE_DIR")
  experiment=${EXPERIMENT:-$task-$SETTING-$STRATEGY-$ROLLOUT}
  if [[ ! -f "$RECIPE_DIR/config/$SETTING.yaml" ]]; then
    echo "SETTING=$SETTING: no $RECIPE_DIR/config/$SETTING.yaml; choose one of:" >&2
    find "$RECIPE_DIR/config" -name '[!_]*.yaml' -exec basename {} .yaml \; | sort >&2
    return 2
  fi
  case "$TRAINER" in
    v1 | classic) ;;
    *)
      echo "TRAINER=$TRAINER: choose v1 (veRL's V1 sync trainer) or classic (trainer.use_v1=false)" >&2
      return 2
      ;;
  esac
  local -a entry=(-m coba_verl.main)
  if [[ -n "$ESTIMATE" ]]; then
    entry=(-m coba_verl.verl_plugin.estimate --output "$ESTIMATE" --samples "$SAMPLES")
  fi
  local -a cmd=(
    "$PYTHON" "${entry[@]}"
    --config-path "$RECIPE_DIR/config"
    --config-name "$SETTING"
    "coba.strategy=$STRATEGY"
    "actor_rollout_ref.rollout.name=$ROLLOUT"
    "data.train_files=$TRAIN_FILES"
    "data.val_files=$VAL_FILES"
    "trainer.project_name=$PROJECT"
    "trainer.experiment_name=$experiment"
    "trainer.logger=$LOGGER"
  )
  if [[ "$TRAINER" == classic ]]; then
    cmd+=("trainer.use_v1=false")
  fi
  if [[ -n "$MODEL_PATH" ]]; then
    cmd+=("actor_rollout_ref.model.path=$MODEL_PATH")
  fi
  if [[ -n "$NNODES" ]]; then
    cmd+=("trainer.nnodes=$NNODES")
  fi
  if [[ -n "$N_GPUS_PER_NODE" ]]; then
    cmd+=("trainer.n_gpus_per_node=$N_GPUS_PER_NODE")
  fi
  cmd+=("$@")
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '%s\n' "${cmd[@]}"
    return 0
  fi
  # No HYDRA_FULL_ERROR: coba-verl's own refusals print as one line (coba-verl: ...), other errors
  # with Hydra's short traceback; export HYDRA_FULL_ERROR=1 for Hydra's frames too.
  exec "${cmd[@]}"
}
