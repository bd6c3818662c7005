"""``examples/trl_grpo_coba.py`` runs end to end (tiny settings, no warm start)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "trl_grpo_coba.py"


def test_example_script_trains_evaluates_and_logs_coba_metrics(tmp_path):
    spec = importlib.util.spec_from_file_location("trl_grpo_coba", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = [
        "--steps", "4", "--n-train", "8", "--n-eval", "8", "--eval-steps", "2", "--prompts-per-step", "4",
        "--num-generations", "4", "--max-rollouts", "8", "--warm-steps", "0", "--hidden-size", "32",
        "--threads", "0", "--output-dir", str(tmp_path),
    ]  # fmt: skip
    trainer = module.main(argv)
    history = trainer.state.log_history
    assert trainer.state.global_step == 4
    assert sum("eval_reward" in h for h in history) == 2
    assert all("coba/budget_mean" in h for h in history if "loss" in h)
    plugin, step = module.plugin_share(history)
    assert 0 < plugin < step
