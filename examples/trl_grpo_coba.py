"""Train a tiny Qwen2 on generated arithmetic with TRL's GRPO and CoBA-RL budgets, on CPU in minutes.

    PYTHONPATH=.trl-site python examples/trl_grpo_coba.py                     # coba, 128 steps, CPU
    PYTHONPATH=.trl-site python examples/trl_grpo_coba.py --strategy uniform  # stock GRPO budgets
    PYTHONPATH=.trl-site accelerate launch --num_processes 8 examples/trl_grpo_coba.py --gpu \\
        --prompts-per-step 64

Run from the repository root. ``PYTHONPATH=.trl-site`` is for the Quick start's install, which
puts TRL in ``.trl-site`` apart from veRL's environment; where TRL is installed (from a clone,
``pip install torch==2.13.0 -e ".[trl]"`` in an environment without veRL), drop it. The first
line took 51 s (wall) on 2 cores beside a veRL training and tests (load average 2.8-4.3), 1 torch
thread: about 25 s of warm start (1400 steps to 41 % probe accuracy), 18 s for the 128 GRPO steps,
the rest imports and evaluation.

The task, the character tokenizer and the model are the CPU lab's (`coba_verl.arithmetic`; see
``docs/lab.md``): a supervised warm start brings the random model to about 40 % sampled accuracy
on the easier levels, so that pass rates spread over [0, 1]; then `CobaGRPOTrainer` trains with
num_generations = G as the mean budget per prompt. The last lines report the held-out reward
(avg@4 accuracy) and the plugin's share of a training step (``coba/plugin_time_s`` over TRL's
``step_time``). To compare strategies, read ``coba/prompt_mean_score`` (each prompt counted once)
or ``eval_reward``, not TRL's ``reward``: it averages over completions, so under CoBA it leans
toward the prompts given more of them.

The only differences from a stock TRL script are marked ``# CoBA-RL``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

try:  # the documented command line, the docstring's first (tests/trl/test_trl_example.py)
    from trl import GRPOConfig
except ModuleNotFoundError as err:
    if err.name != "trl":
        raise
    raise SystemExit(
        "examples/trl_grpo_coba.py needs TRL, which is not importable here. After the Quick start "
        "(TRL in .trl-site, apart from veRL's environment) run it from the repository root as\n"
        "    PYTHONPATH=.trl-site python examples/trl_grpo_coba.py\n"
        'or run it plainly in an environment of its own with TRL (pip install -e ".[trl]"; not veRL\'s).'
    ) from err
import torch

from coba_verl.arithmetic.hf_dataset import arithmetic_dataset, exact_answer_reward
from coba_verl.arithmetic.model import ModelSpec, build_model_for
from coba_verl.arithmetic.task import make_splits
from coba_verl.arithmetic.tokenizer import transformers_tokenizer
from coba_verl.arithmetic.warmstart import warm_start
from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer  # CoBA-RL: instead of `from trl import GRPOTrainer`

logger = logging.getLogger("trl_grpo_coba")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--strategy", default="coba", help="CobaConfig.strategy (coba, uniform, knapsack, ...)")
    p.add_argument("--steps", type=int, default=128, help="optimiser steps (one generation round each)")
    p.add_argument("--prompts-per-step", type=int, default=16, help="M prompts per round, over all processes")
    p.add_argument("--num-generations", type=int, default=8, help="G, the mean budget per prompt")
    p.add_argument("--max-rollouts", type=int, default=32, help="B_up (CobaConfig.max_rollouts)")
    p.add_argument("--n-train", type=int, default=128, help="training prompts (ids 0..n-1)")
    p.add_argument("--n-eval", type=int, default=128, help="held-out prompts (0: no evaluation)")
    p.add_argument("--eval-steps", type=int, default=32, help="evaluate every this many steps")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warm-steps", type=int, default=4000, help="most supervised warm-start steps")
    p.add_argument("--warm-target", type=float, default=0.4, help="warm-start probe accuracy to reach")
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default="runs/trl_grpo_coba")
    p.add_argument("--save-steps", type=int, default=0, help="checkpoint every this many steps (0: never)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (1 is fastest for this model size; 0: torch default)",
    )
    p.add_argument("--gpu", action="store_true", help="train on the accelerator (bf16) instead of use_cpu")
    return p.parse_args(argv)


def plugin_share(log_history: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean ``coba/plugin_time_s`` and mean TRL ``step_time`` (seconds) over the logged steps."""
    rows = [h for h in log_history if "coba/plugin_time_s" in h and "step_time" in h]
    if not rows:
        return math.nan, math.nan
    plugin = sum(h["coba/plugin_time_s"] for h in rows) / len(rows)
    step = sum(h["step_time"] for h in rows) / len(rows)
    return plugin, step


def main(argv: Sequence[str] | None = None) -> CobaGRPOTrainer:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    train, held_out = make_splits(args.seed, args.n_train, max(args.n_eval, 1))
    tokenizer = transformers_tokenizer()
    spec = ModelSpec(hidden_size=args.hidden_size, intermediate_size=4 * args.hidden_size)
    model = build_model_for(tokenizer, spec, seed=args.seed)
    if args.warm_steps > 0:
        fit = warm_start(
            model,
            tokenizer.backend_tokenizer,
            max_steps=args.warm_steps,
            batch_size=64,
            lr=3e-3,
            seed=args.seed,
            target=args.warm_target,
            exclude=frozenset(train.prompts) | frozenset(held_out.prompts),
        )
        logger.info("warm start: %d steps, probe accuracy %s", fit.steps, fit.probe_acc[-1:])

    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
    rows_per_process, rest = divmod(args.prompts_per_step * args.num_generations, world)
    if rest:
        raise ValueError(
            f"--prompts-per-step * --num-generations = {args.prompts_per_step * args.num_generations} "
            f"rows must split over {world} processes."
        )
    config = GRPOConfig(
        output_dir=args.output_dir,
        use_cpu=not args.gpu,
        bf16=args.gpu,
        seed=args.seed,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        per_device_train_batch_size=rows_per_process,
        num_generations=args.num_generations,
        max_completion_length=8,
        temperature=1.0,
        num_generations_eval=4,
        per_device_eval_batch_size=64,
        eval_strategy="steps" if args.n_eval > 0 else "no",
        eval_steps=args.eval_steps,
        logging_steps=1,
        save_strategy="steps" if args.save_steps > 0 else "no",
        save_steps=max(args.save_steps, 1),
        report_to="none",
        disable_tqdm=True,
    )
    trainer = CobaGRPOTrainer(
        model=model,
        reward_funcs=exact_answer_reward,
        args=config,
        train_dataset=arithmetic_dataset(train),  # has the `prompt_id` column (the lab's stable ids)
        eval_dataset=arithmetic_dataset(held_out) if args.n_eval > 0 else None,
        processing_class=tokenizer,
        coba_config=CobaConfig(strategy=args.strategy, max_rollouts=args.max_rollouts),  # CoBA-RL
        prompt_id_column="prompt_id",  # CoBA-RL
    )
    trainer.train()
    evals = [(h["step"], h["eval_reward"]) for h in trainer.state.log_history if "eval_reward" in h]
    logger.info("held-out reward (avg@4 accuracy) by step: %s", [(s, round(r, 3)) for s, r in evals])
    plugin, step = plugin_share(trainer.state.log_history)
    logger.info(
        "CoBA-RL plugin: %.2f ms of a %.1f ms training step (%.2f %%)",
        1e3 * plugin,
        1e3 * step,
        100 * plugin / step,
    )
    return trainer


if __name__ == "__main__":
    main()
