"""CoBA rounds on two CPU processes; run by ``test_trl_two_processes.py`` as

    accelerate launch --multi_gpu --num_processes 2 tests/trl/two_process_run.py OUT_DIR

(``--multi_gpu`` selects torchrun's launcher; the training itself runs with ``use_cpu=True``.)

Rank 1's allocator is made to disagree with rank 0's by one rollout (what a libm that breaks a
tie between two gains the other way would do), and rank 0's allocator fails in round 4 of
``max_steps=4``: rounds 1-3 train, round 4 raises.

Each process writes ``OUT_DIR/rank<r>.json``: the budgets of every round it expanded (``used``,
as {prompt id: B_i}), the answers its own allocator gave (``allocated``), the prompts it sent to
generation per round, in order, its tracker's pass rates at the end, and the error ``train()``
ended with. The four prompts and rewards are the ones of ``conftest.py`` (this script's folder is
first on ``sys.path``); each round has 16 rows, 8 per process.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from conftest import PROMPTS, TINY, G, cpu_grpo_config, four_prompts, mixed_reward

from coba_verl.arithmetic.model import build_model_for
from coba_verl.arithmetic.tokenizer import transformers_tokenizer
from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer

FAILING_ROUND = 4  # rank 0's allocator raises in this round
FAILURE = "injected allocator failure"


def move_one_rollout(budgets: np.ndarray) -> np.ndarray:
    """The same total with one rollout moved from the largest budget to the smallest other one."""
    out = budgets.copy()
    i = int(np.argmax(out))
    j = min((k for k in range(out.size) if k != i), key=lambda k: out[k])
    out[i] -= 1
    out[j] += 1
    return out


def as_dict(ids: np.ndarray, budgets: np.ndarray) -> dict[int, int]:
    return dict(zip(np.asarray(ids).tolist(), np.asarray(budgets).tolist(), strict=True))


def main(out_dir: Path) -> None:
    tokenizer = transformers_tokenizer()
    config = cpu_grpo_config(
        out_dir / "trainer", per_device_train_batch_size=len(PROMPTS) * G // 2, max_steps=FAILING_ROUND
    )
    trainer = CobaGRPOTrainer(
        model=build_model_for(tokenizer, TINY, seed=0),
        reward_funcs=mixed_reward,
        args=config,
        train_dataset=four_prompts(),
        processing_class=tokenizer,
        coba_config=CobaConfig(max_rollouts=10),
    )
    rank = trainer.accelerator.process_index
    used: list[dict[int, int]] = []
    allocated: list[dict[int, int]] = []
    generated: list[list[str]] = []
    plan_round, allocate, generate = trainer._plan_round, trainer.allocator.allocate, trainer._generate

    def plan_spy(inputs):
        plan = plan_round(inputs)
        used.append(as_dict(plan.ids, plan.allocation.budgets))
        return plan

    def allocate_spy(ids, total):
        if rank == 0 and len(allocated) == FAILING_ROUND - 1:
            raise ValueError(FAILURE)
        result = allocate(ids, total)
        if rank != 0:
            result = dataclasses.replace(result, budgets=move_one_rollout(result.budgets))
        allocated.append(as_dict(ids, result.budgets))
        return result

    def generate_spy(prompts):
        generated.append(list(prompts))
        return generate(prompts)

    trainer._plan_round, trainer.allocator.allocate, trainer._generate = plan_spy, allocate_spy, generate_spy
    error = None
    try:
        trainer.train()
    except Exception as err:  # recorded for the test, which expects round 4 to fail on both ranks
        error = f"{type(err).__name__}: {err}"
    record = {
        "world": trainer.accelerator.num_processes,
        "used": used,
        "allocated": allocated,
        "generated": generated,
        "pass_rates": trainer.allocator.tracker.pass_rates(np.arange(len(PROMPTS))).tolist(),
        "error": error,
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))
    # gloo's threads end with the process group: left to the interpreter's exit, a rank that saw the
    # injected failure mid-round could abort there ("terminate called without an active exception")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
