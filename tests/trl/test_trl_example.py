"""``examples/trl_grpo_coba.py`` runs end to end as its docstring (and README) documents it, at tiny size."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from coba_verl.arithmetic.hf_dataset import arithmetic_dataset
from coba_verl.arithmetic.task import make_splits
from coba_verl.trl import CobaGRPOTrainer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl_grpo_coba.py"
TINY_ARGS = [
    "--steps", "4", "--n-train", "8", "--n-eval", "8", "--eval-steps", "2", "--prompts-per-step", "4",
    "--num-generations", "4", "--max-rollouts", "8", "--warm-steps", "0", "--hidden-size", "32",
]  # fmt: skip


def documented_command() -> str:
    """The docstring's first command line, comment removed: the line README documents."""
    doc = ast.get_docstring(ast.parse(EXAMPLE.read_text()))
    line = next(ln for ln in doc.splitlines() if "examples/trl_grpo_coba.py" in ln)
    return line.split("#", 1)[0].strip()


@pytest.mark.slow  # about 20 s: a fresh interpreter imports torch, transformers and TRL
def test_documented_command_trains_evaluates_and_logs_coba_metrics(tmp_path):
    command = f"{documented_command()} {shlex.join(TINY_ARGS)} --output-dir {shlex.quote(str(tmp_path))}"
    assert command.startswith("PYTHONPATH=.trl-site python examples/trl_grpo_coba.py ")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the line's own PYTHONPATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # `python`
    done = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]

    train_logs = [ln for ln in done.stdout.splitlines() if ln.startswith("{'loss'")]  # TRL's PrinterCallback
    assert len(train_logs) == 4
    assert all("'coba/budget_mean'" in ln and "'coba/prompt_mean_score'" in ln for ln in train_logs)
    evals = re.search(r"held-out reward \(avg@4 accuracy\) by step: \[(.*)\]", out)
    assert evals is not None and re.findall(r"\((\d+),", evals.group(1)) == ["2", "4"]
    share = re.search(r"CoBA-RL plugin: ([\d.]+) ms of a ([\d.]+) ms training step", out)
    assert share is not None and 0 < float(share.group(1)) < float(share.group(2))


def test_example_without_trl_exits_naming_the_documented_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ModuleNotFoundError
    spec = importlib.util.spec_from_file_location("trl_grpo_coba", EXAMPLE)
    with pytest.raises(SystemExit) as exited:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert documented_command() in str(exited.value)
    assert "needs TRL, which is not importable here" in str(exited.value)


def test_arithmetic_dataset_has_the_trainers_default_id_column():
    default = inspect.signature(CobaGRPOTrainer.__init__).parameters["prompt_id_column"].default
    train, _ = make_splits(0, 4, 1)
    assert default in arithmetic_dataset(train).column_names
