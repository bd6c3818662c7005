"""Three CoBA rounds on two CPU processes; run by ``test_trl_two_processes.py`` as

    accelerate launch --multi_gpu --num_processes 2 tests/trl/two_process_run.py OUT_DIR

(``--multi_gpu`` selects torchrun's launcher; the training itself runs with ``use_cpu=True``.)

Each process writes ``OUT_DIR/rank<r>.json``: the budgets it allocated per round (as
{prompt id: B_i}), the prompts it sent to generation per round, in order, and its tracker's pass
rates at the end. The four prompts and rewards are the ones of ``conftest.py`` (this script's
folder is first on ``sys.path``); each round has 16 rows, 8 per process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from conftest import PROMPTS, TINY, G, four_prompts, mixed_reward
from trl import GRPOConfig

from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer
from coba_verl.trl.arithmetic import build_hf_tokenizer, build_tiny_qwen2


def main(out_dir: Path) -> None:
    tokenizer = build_hf_tokenizer()
    config = GRPOConfig(
        output_dir=str(out_dir / "trainer"),
        use_cpu=True,
        bf16=False,
        seed=0,
        per_device_train_batch_size=len(PROMPTS) * G // 2,
        num_generations=G,
        max_completion_length=8,
        max_steps=3,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = CobaGRPOTrainer(
        model=build_tiny_qwen2(tokenizer, TINY, seed=0),
        reward_funcs=mixed_reward,
        args=config,
        train_dataset=four_prompts(),
        processing_class=tokenizer,
        coba_config=CobaConfig(max_rollouts=10),
    )
    budgets: list[dict[int, int]] = []
    generated: list[list[str]] = []
    allocate, generate = trainer.allocator.allocate, trainer._generate

    def allocate_spy(ids, total):
        result = allocate(ids, total)
        budgets.append(dict(zip(np.asarray(ids).tolist(), result.budgets.tolist(), strict=True)))
        return result

    def generate_spy(prompts):
        generated.append(list(prompts))
        return generate(prompts)

    trainer.allocator.allocate, trainer._generate = allocate_spy, generate_spy
    trainer.train()
    rank = trainer.accelerator.process_index
    record = {
        "world": trainer.accelerator.num_processes,
        "budgets": budgets,
        "generated": generated,
        "pass_rates": trainer.allocator.tracker.pass_rates(np.arange(len(PROMPTS))).tolist(),
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
