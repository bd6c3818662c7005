"""What the tiny-recipe benches share (``tiny_cpu.py``, ``async_tiny.py``, ``dapo_tiny.py``): the
launch of ``recipes/tiny_cpu`` on prepared data, veRL's logged rows, the held-out score, and a
uniform-against-CoBA table.

The data come from ``python -m coba_verl.arithmetic.tiny --output-dir ~/data/coba/tiny_cpu``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def recipe_command(
    data: Path, work: Path, strategy: str, *overrides: str, config_name: str = "tiny"
) -> list[str]:
    """``python -m coba_verl.main`` on the tiny recipe's ``config_name`` (a file of
    ``recipes/tiny_cpu/config``) with ``data``'s files and model, its checkpoints in ``work``, veRL's
    metrics to the console and the file logger, no validation before training, then ``overrides``
    (later ones win)."""
    return [
        sys.executable, "-m", "coba_verl.main",
        "--config-path", str(REPO / "recipes/tiny_cpu/config"), "--config-name", config_name,
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"actor_rollout_ref.model.path={data / 'model'}", f"coba.strategy={strategy}",
        f"trainer.default_local_dir={work / 'ckpt'}", "trainer.logger=[console,file]",
        "trainer.val_before_train=false", *overrides,
    ]  # fmt: skip


def logger_env(work: Path) -> dict[str, str]:
    """The environment that sends veRL's file logger to ``work / metrics.jsonl``."""
    return {**os.environ, "VERL_FILE_LOGGER_PATH": str(work / "metrics.jsonl")}


def read_log(work: Path) -> list[dict]:
    """veRL's file-logger rows of the run in ``work`` (its ``metrics.jsonl``), or of the metrics file
    ``work`` itself (the copies under docs/data)."""
    file = work / "metrics.jsonl" if work.is_dir() else work
    return [json.loads(line)["data"] for line in file.read_text().splitlines()]


def run_seeded(
    data: Path, strategy: str, seed: int, steps: int, prefix: str, *overrides: str, config_name: str = "tiny"
) -> tuple[list[dict], Path]:
    """One run of ``steps`` steps of the tiny recipe's ``config_name`` with ``seed`` as the data and
    rollout seed, validated after the last step; veRL's logged rows (the last with the final
    validation) and the run's folder.

    ``trainer.total_epochs`` is set to ``steps`` (at least one step an epoch), so that the steps,
    not the recipe's epochs over a small training set, end the run; a run that logs fewer steps
    than asked stops the bench (its figures would average fewer steps than the table says)."""
    work = Path(tempfile.mkdtemp(prefix=f"{prefix}_{strategy}_{seed}_"))
    command = recipe_command(
        data, work, strategy,
        f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}",
        f"trainer.total_training_steps={steps}", f"trainer.total_epochs={steps}",
        f"trainer.test_freq={steps}", "trainer.save_freq=-1",
        *overrides, config_name=config_name,
    )  # fmt: skip
    env = {**logger_env(work), "TOKENIZERS_PARALLELISM": "false"}
    with open(work / "stdout.log", "w") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{strategy} seed {seed} failed (exit {done.returncode}); see {work / 'stdout.log'}")
    rows = read_log(work)
    logged = sum("timing_s/step" in row for row in rows)
    if logged != steps:
        log = work / "stdout.log"
        raise SystemExit(f"{strategy} seed {seed} logged {logged} steps of {steps}; see {log}")
    return rows, work


def held_out(rows: list[dict]) -> float:
    """``val-core/.../acc/mean@k`` of the last logged row (the final validation), NaN if absent."""
    last = rows[-1] if rows else {}
    return next((v for k, v in last.items() if k.startswith("val-core/") and "/acc/mean@" in k), np.nan)


def mean_held_out(rows_by_seed: list[list[dict]]) -> float:
    """`held_out` averaged over seeds, NaN where no seed has one."""
    finals = [held_out(rows) for rows in rows_by_seed]
    return float(np.nanmean(finals)) if not np.all(np.isnan(finals)) else float("nan")


def print_side_by_side(table: dict[str, dict], width: int) -> None:
    """Each figure of ``table["uniform"]`` beside ``table["coba"]`` and their ratio (a pair such as
    a min-max range is printed without one)."""
    print(f"{'':{width}}{'uniform':>14}{'coba':>14}{'coba/uniform':>14}")
    for key in table["uniform"]:
        u, c = table["uniform"][key], table["coba"][key]
        if isinstance(u, tuple):
            print(f"{key:{width}}{str(u):>14}{str(c):>14}")
            continue
        ratio = c / u if u else float("nan")
        print(f"{key:{width}}{u:>14.3f}{c:>14.3f}{ratio:>14.3f}")
