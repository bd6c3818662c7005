#!/usr/bin/env bash
# The Quick start's first command (README): from a clone with Python 3.11, set up .venv, prepare the
# tiny model, data and pass-rate priors, train CoBA-RL with veRL's real trainer on CPU, summarise.
#
#   bash scripts/quickstart.sh                   # then: bash .ci/run (the tests, as CI runs them)
#   STEPS=32 bash scripts/quickstart.sh          # longer (16 steps are an epoch of 256 prompts)
#   STRATEGY=uniform bash scripts/quickstart.sh  # GRPO with everything else equal
#
# The model and data are the tiny recipe's (recipes/tiny_cpu) on its two easy levels, whose short
# warm start leaves pass rates spread between 0 and 1; their measured pass rates (priors.jsonl)
# start CoBA-RL's tracker, so budgets differ from uniform from step 1 (without them epoch 1 is
# uniform GRPO). Cached: the install is redone only when pyproject.toml changed, the data and
# model only when missing (python -m coba_verl.arithmetic.tiny reuses its output), so a second run
# only re-measures the pass rates (seconds) before it trains. veRL's replay buffer checks for
# finished rollouts every 0.05 s instead of its 2 s (coba_cpu.poll_interval_s): a tiny model's
# rollouts take less than that. The summary (docs/quickstart.md) goes to the terminal and to
# RUN_DIR/summary.txt, its picture to RUN_DIR/summary.png, with the wall clock of each part.
# Variables: PYTHON (python3), DATA_DIR (~/data/coba), STEPS (16), STRATEGY (coba), RUN_DIR
# (runs/quickstart: console log, metrics, summary), COBA_INSTALLER (uv; pip to install with pip:
# scripts/pip_install.sh); arguments are appended as Hydra overrides (recipes/tiny_cpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DATA_DIR=${DATA_DIR:-$HOME/data/coba}
STEPS=${STEPS:-16}
STRATEGY=${STRATEGY:-coba}
RUN_DIR=${RUN_DIR:-runs/quickstart}
TINY=$DATA_DIR/tiny_cpu_easy
EXPERIMENT=quickstart-$STRATEGY

echo "== 1/3 install: .venv, torch==2.13.0 -e \".[test]\""
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
# pip_install: uv pip install when uv can be had from the registry, pip otherwise (the same arguments).
# shellcheck source=scripts/pip_install.sh
source scripts/pip_install.sh
# Bytecode on first import (scripts/pip_install.sh, COBA_BYTECODE): this script's processes compile
# only the modules they import, once, and write it to .venv; the install skips compiling the rest.
export COBA_BYTECODE=lazy
unset PYTHONDONTWRITEBYTECODE
stamp=.venv/.coba-quickstart-installed
if ! sha256sum pyproject.toml | cmp -s - "$stamp"; then
  pip_install --quiet torch==2.13.0 -e ".[test]"
  sha256sum pyproject.toml >"$stamp"
else
  echo "already installed ($stamp matches pyproject.toml)"
fi

installed_s=$SECONDS
# While the data step runs, a lowest-priority process compiles the bytecode of what veRL's processes
# import as they start (their packages beyond torch and transformers, which the data step imports
# itself), so that they find it written instead of compiling it one after another (COBA_BYTECODE=lazy).
# It takes what the warm start leaves of the two cores; what it has not reached is compiled on import.
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
packages=(verl peft datasets transfer_queue tensordict hydra omegaconf antlr4 pydantic opentelemetry
  opencensus aiohttp fastapi starlette uvicorn zmq grpc matplotlib
  ray/_private ray/dashboard ray/core ray/util ray/autoscaler ray/experimental ray/_common ray/dag)
nice -n 19 python -m compileall -q --invalidation-mode timestamp -x '/tests?/' \
  "${packages[@]/#/$site/}" "$site"/ray/*.py coba_verl >/dev/null 2>&1 &
compiling=$!
trap 'kill "$compiling" 2>/dev/null || true' EXIT
echo "== 2/3 data, model and pass-rate priors: $TINY"
# Two torch threads, fixed: the same model on any machine (2 threads 21 s, 1 thread 33 s on an idle
# 2-core machine; the thread count changes the warm start's sums, so it is part of the data).
python -m coba_verl.arithmetic.tiny --output-dir "$TINY" --easy --priors 8 --threads 2

prepared_s=$SECONDS
echo "== 3/3 CoBA-RL ($STRATEGY) with veRL's trainer on CPU: $STEPS steps of 16 prompts x 4 rollouts"
mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
log=$RUN_DIR/console.log
metrics=$RUN_DIR/metrics.jsonl
rm -f "$metrics"
export VERL_FILE_LOGGER_PATH=$metrics
status=0
DATA_DIR=$DATA_DIR TRAIN_FILES=$TINY/train.parquet VAL_FILES=$TINY/test.parquet MODEL_PATH=$TINY/model \
  STRATEGY=$STRATEGY EXPERIMENT=$EXPERIMENT LOGGER='["console","file"]' PYTHON=python \
  bash recipes/tiny_cpu/run.sh \
  "coba.prior_file=$TINY/priors.jsonl" coba_cpu.poll_interval_s=0.05 \
  "trainer.total_training_steps=$STEPS" "trainer.test_freq=$STEPS" "trainer.save_freq=$STEPS" \
  trainer.resume_mode=disable "$@" >"$log" 2>&1 || status=$?
if [[ $status -ne 0 ]]; then
  echo "training failed (exit $status); the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit "$status"
fi

trained_s=$SECONDS

echo "== summary (also in $RUN_DIR/summary.txt; picture: summary.png beside it)"
# --val-files: the held-out prompts, counted for the standard error of the held-out change.
python -m coba_verl.verl_plugin.reports.run_summary "$metrics" --log "$log" --val-files "$TINY/test.parquet" \
  --checkpoints "$TINY/checkpoints/$EXPERIMENT" --png "$RUN_DIR/summary.png" | tee "$RUN_DIR/summary.txt"
echo "quick start wall clock: install $installed_s s, data and model $((prepared_s - installed_s)) s," \
  "training $((trained_s - prepared_s)) s (launch to exit: the time above plus Ray, workers and the" \
  "validation before training), $SECONDS s in all; load average $(cut -d' ' -f1-3 /proc/loadavg)" |
  tee -a "$RUN_DIR/summary.txt"
echo "next: bash .ci/run (the tests, as CI runs them; README, Quick start)"
